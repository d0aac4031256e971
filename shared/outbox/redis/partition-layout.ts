import type { Redis } from 'ioredis';
import { ConfigError } from '../errors/config-error.js';
import { describeRedis } from './describe.js';
import { keys } from './keys.js';
import { partitionLayout, partitionTag, type Partitions } from './partitions.js';

/** The one-line refusal of a partition claimed for another number of partitions (a setting: exit 2, in an app 78). */
export function layoutMismatch(redis: Redis, expected: string, served: string): ConfigError {
  const [, count] = served.split('/');
  return new ConfigError(
    `${describeRedis(redis)} holds partition ${served} (of ${count}), not ${expected}: set --partitions / OUTBOX_PARTITIONS to ${count} on every relay and consumer of this store`,
  );
}

/**
 * Refuses (exit 2) partitions that Redis holds for another number of partitions: a partition whose
 * meta hash names another "i/P", or, for one partition on one Redis, a Redis whose queues are
 * partitioned (partition 0's meta hash exists). A relay or consumer configured for the wrong number
 * would leave events in queues nobody consumes, or split an aggregate's events between two.
 */
export async function checkPartitionLayout(partitions: Partitions): Promise<void> {
  if (partitions.count === 1 && String(partitions.clients[0].options.keyPrefix ?? '').endsWith('}:') === false) {
    const redis = partitions.clients[0];
    const partitioned = await redis.hget(`${partitionTag(0, 2, false)}${keys.meta}`, 'partition');
    if (partitioned !== null) {
      const [, count] = partitioned.split('/');
      throw new ConfigError(`${describeRedis(redis)} holds ${count} partitions, not 1: set --partitions / OUTBOX_PARTITIONS to ${count} on every relay and consumer of this store`);
    }
  }
  // Read all at once, judged in order: the refusal names the lowest partition that is wrong.
  const metas = await Promise.all(partitions.clients.map((redis) => redis.hmget(keys.meta, 'store', 'partition')));
  metas.forEach(([store, layout], index) => {
    const expected = partitionLayout(index, partitions.count);
    if (store !== null && (layout ?? '0/1') !== expected) throw layoutMismatch(partitions.clients[index], expected, layout ?? '0/1');
  });
}
