import type { Redis } from 'ioredis';
import { isCluster, mastersOf, slotOf } from './cluster-client.js';

/** The key prefix (namespace, and partition if any) of a connection: ioredis adds it to every key a command names. */
export function keyPrefixOfConnection(redis: Redis): string {
  return String(redis.options.keyPrefix ?? '');
}

/** A partition's part of a key prefix: the trailing hash tag and ':' (namespaces contain no '{'). */
const PARTITION_SUFFIX = /\{[^{}]+\}:$/;

/** The partition tag at the end of a connection's key prefix (`{p3}:`), '' for none. */
export function partitionTagOfConnection(redis: Redis): string {
  return PARTITION_SUFFIX.exec(keyPrefixOfConnection(redis))?.[0] ?? '';
}

/** The namespace's part of a connection's key prefix (`ns:`), without the partition's tag; '' for none. */
export function namespacePrefixOfConnection(redis: Redis): string {
  const prefix = keyPrefixOfConnection(redis);
  return prefix.slice(0, prefix.length - partitionTagOfConnection(redis).length);
}

/**
 * The keys matching `pattern` within the connection's namespace, without the prefix (so they can be
 * passed to commands, which add it again). SCAN is the one place where ioredis does not add it. On
 * a Redis Cluster every master is scanned (each holds its own slots).
 */
export async function* scanKeys(redis: Redis, pattern: string): AsyncGenerator<string> {
  const prefix = keyPrefixOfConnection(redis);
  for (const node of mastersOf(redis)) {
    for await (const batch of node.scanStream({ match: prefix + pattern, count: 1000 })) {
      for (const key of batch as string[]) yield key.slice(prefix.length);
    }
  }
}

/**
 * Deletes (UNLINK, 1000 at a time) every key `found` yields, e.g. from `scanKeys`; resolves how many.
 * On a Redis Cluster one UNLINK names keys of one slot only (else CROSSSLOT).
 */
export async function unlinkAll(redis: Redis, found: AsyncIterable<string>): Promise<number> {
  let deleted = 0;
  let batch: string[] = [];
  const unlink = async (keys: string[]) => {
    if (!isCluster(redis)) return redis.unlink(...keys);
    const prefix = keyPrefixOfConnection(redis);
    const bySlot = new Map<number, string[]>();
    for (const key of keys) {
      const slot = slotOf(prefix + key);
      const group = bySlot.get(slot);
      if (group) group.push(key);
      else bySlot.set(slot, [key]);
    }
    const counts = await Promise.all([...bySlot.values()].map((group) => redis.unlink(...group)));
    return counts.reduce((sum, count) => sum + count, 0);
  };
  for await (const key of found) {
    batch.push(key);
    if (batch.length === 1000) {
      deleted += await unlink(batch);
      batch = [];
    }
  }
  if (batch.length > 0) deleted += await unlink(batch);
  return deleted;
}
