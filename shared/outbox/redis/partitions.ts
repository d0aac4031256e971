import type { Redis } from 'ioredis';
import { ConfigError } from '../errors/config-error.js';

/**
 * Events are partitioned by aggregate: every event of one aggregate goes to the same partition, so
 * its order holds there, and partitions are consumed independently (by different consumers, on
 * different Redis Cluster nodes). A partition is a key prefix: partition p's keys are
 * `<namespace:>{p<p>}:<key>`, one hash tag for all of them, so each Lua script (dedupe markers and
 * user effects included) runs in one Cluster slot. Each partition is reached through its own
 * connection whose ioredis `keyPrefix` carries that tag, so the code and the scripts name their keys
 * exactly as with one Redis. One partition on one Redis (the default) has no tag: the seed's names.
 */
export interface Partitions {
  /** P, the number of partitions. */
  readonly count: number;
  /** One connection per partition, by index. */
  readonly clients: readonly Redis[];
  /** The partition of an aggregate key. */
  indexOf(aggregate: string): number;
}

export const MAX_PARTITIONS = 1024;

/** The partition of `aggregate` among `count`: FNV-1a (32 bit) of its UTF-16 code units, modulo `count`. */
export function partitionOf(aggregate: string, count: number): number {
  if (count === 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < aggregate.length; i += 1) {
    hash ^= aggregate.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % count;
}

/** The key prefix of partition `index` (after the namespace's): '' for the one partition of a single Redis. */
export function partitionTag(index: number, count: number, cluster: boolean): string {
  return count === 1 && !cluster ? '' : `{p${index}}:`;
}

/** "i/P": how a partition names itself in its meta hash (field `partition`), so a relay or consumer configured for another P is refused. */
export function partitionLayout(index: number, count: number): string {
  return `${index}/${count}`;
}

function isPartitions(value: Redis | Partitions): value is Partitions {
  return Array.isArray((value as Partitions).clients);
}

/** `redis` as the one partition it is, or the partitions as given. */
export function partitionsOf(redis: Redis | Partitions): Partitions {
  if (isPartitions(redis)) return redis;
  return { count: 1, clients: [redis], indexOf: () => 0 };
}

/** Checks P (1 to 1024) before anything connects. */
export function checkPartitionCount(count: number, name = 'partitions'): void {
  if (!Number.isInteger(count) || count < 1 || count > MAX_PARTITIONS) {
    throw new ConfigError(`${name} must be a whole number from 1 to ${MAX_PARTITIONS}, got ${String(count)}`);
  }
}

/**
 * Opens one connection per partition with `connect` (given the partition's key tag, which it adds
 * after the namespace prefix); on a failure closes the ones already open.
 */
export async function connectPartitions(count: number, cluster: boolean, connect: (tag: string, index: number) => Promise<Redis>): Promise<Partitions> {
  checkPartitionCount(count);
  const clients: Redis[] = [];
  try {
    for (let index = 0; index < count; index += 1) clients.push(await connect(partitionTag(index, count, cluster), index));
  } catch (error) {
    for (const client of clients) client.disconnect();
    throw error;
  }
  return { count, clients, indexOf: (aggregate) => partitionOf(aggregate, count) };
}

/** Groups `items` by the partition of `aggregateOf(item)`, keeping their order within each partition. */
export function byPartition<T>(partitions: Partitions, items: readonly T[], aggregateOf: (item: T) => string): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const item of items) {
    const index = partitions.indexOf(aggregateOf(item));
    let group = groups.get(index);
    if (!group) groups.set(index, (group = []));
    group.push(item);
  }
  return groups;
}
