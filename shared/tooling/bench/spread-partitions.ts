import type { Redis } from 'ioredis';
import { partitionTag } from '../../outbox/redis/partitions.js';
import { testClient } from '../local/redis-server.js';
import { waitFor } from '../local/wait-for.js';

type SlotRange = [from: number, to: number, master: [host: string, port: number, id: string]];

const slotOf = (redis: Redis, index: number, count: number) => redis.call('CLUSTER', 'KEYSLOT', partitionTag(index, count, true).slice(1, -2)) as Promise<number>;

async function ownerOf(redis: Redis, slot: number): Promise<string> {
  const ranges = (await redis.call('CLUSTER', 'SLOTS')) as SlotRange[];
  const range = ranges.find(([from, to]) => slot >= from && slot <= to);
  return range ? `${range[2][0]}:${range[2][1]}` : '';
}

/** The masters (host:port) the hash slots of partitions 0 to count-1 fall on, by partition. */
export async function mastersOfPartitions(nodes: string[], count: number): Promise<string[]> {
  const redis = testClient(`redis://${nodes[0]}`);
  try {
    const owners: string[] = [];
    for (let index = 0; index < count; index += 1) owners.push(await ownerOf(redis, await slotOf(redis, index, count)));
    return owners;
  } finally {
    redis.disconnect();
  }
}

/**
 * Moves empty hash slots so that partitions 0 to count-1 fall on as many masters as there are: each
 * partition whose master an earlier partition already has goes to a master none has yet (CLUSTER
 * SETSLOT IMPORTING / MIGRATING / NODE, Redis's own procedure, with no keys to migrate). A private
 * bench cluster only: {p0} and {p1} share a master in the slot ranges `redis-cli --cluster create`
 * hands out, so 2 partitions would not be 2 masters' work. Resolves once every master agrees.
 */
export async function spreadPartitions(nodes: string[], count: number): Promise<void> {
  const clients = new Map(nodes.map((node) => [node, testClient(`redis://${node}`)]));
  try {
    const idOf = new Map<string, string>();
    for (const [node, client] of clients) idOf.set(node, String(await client.call('CLUSTER', 'MYID')));
    const any = clients.get(nodes[0])!;
    const used = new Set<string>();
    for (let index = 0; index < count; index += 1) {
      const slot = await slotOf(any, index, count);
      const owner = await ownerOf(any, slot);
      const free = nodes.find((node) => !used.has(node));
      if (!used.has(owner) || !free) {
        used.add(owner);
        continue;
      }
      const [from, to] = [clients.get(owner)!, clients.get(free)!];
      if (Number(await from.call('CLUSTER', 'COUNTKEYSINSLOT', slot)) !== 0) throw new Error(`slot ${slot} of partition ${index} holds keys: cannot move it`);
      await to.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', idOf.get(owner)!);
      await from.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', idOf.get(free)!);
      await to.call('CLUSTER', 'SETSLOT', slot, 'NODE', idOf.get(free)!);
      await from.call('CLUSTER', 'SETSLOT', slot, 'NODE', idOf.get(free)!);
      for (const node of nodes) if (node !== owner && node !== free) await clients.get(node)!.call('CLUSTER', 'SETSLOT', slot, 'NODE', idOf.get(free)!);
      await waitFor(async () => (await Promise.all([...clients.values()].map((client) => ownerOf(client, slot)))).every((node) => node === free), {
        timeoutMs: 10_000,
        message: `the cluster did not agree that slot ${slot} moved to ${free}`,
      });
      used.add(free);
    }
  } finally {
    for (const client of clients.values()) client.disconnect();
  }
}
