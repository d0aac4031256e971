import { createRequire } from 'node:module';
import type { Redis } from 'ioredis';
import { ConfigError } from '../errors/config-error.js';
import { describeRedis } from './describe.js';
import { keys } from './keys.js';
import { namespacePrefixOfConnection, partitionTagOfConnection } from './scan-keys.js';
import { partitionLayout, partitionTag, type Partitions } from './partitions.js';

/** ioredis's Command: a command built with it gets no key prefix (ioredis is CommonJS: required lazily, as connect.ts does). */
function commandClass(): typeof import('ioredis').Command {
  return (createRequire(import.meta.url)('ioredis') as typeof import('ioredis')).Command;
}

/** The one-line refusal of a partition claimed for another number of partitions (a setting: exit 2, in an app 78). */
export function layoutMismatch(redis: Redis, expected: string, served: string): ConfigError {
  const [, count] = served.split('/');
  return new ConfigError(
    `${describeRedis(redis)} holds partition ${served} (of ${count}), not ${expected}: set --partitions / OUTBOX_PARTITIONS to ${count} on every relay and consumer of this store`,
  );
}

/**
 * Refuses (exit 2) partitions that Redis holds for another number of partitions: a partition whose
 * meta hash names another "i/P"; for partitions, a Redis whose unpartitioned meta hash (the seed's
 * names) serves a store; for one partition on one Redis, a Redis whose queues are partitioned
 * (partition 0's meta hash exists). A relay or consumer configured for the wrong number would
 * leave events in queues nobody consumes, or split an aggregate's events between two.
 */
export async function checkPartitionLayout(partitions: Partitions): Promise<void> {
  if (partitions.count > 1 || partitionTagOfConnection(partitions.clients[0]) !== '') {
    // The seed's own meta hash (no partition tag) claimed: a relay for 1 partition feeds the untagged
    // queue, which no consumer of these partitions reads. Read without the connection's key prefix.
    const redis = partitions.clients[0];
    const untagged = `${namespacePrefixOfConnection(redis)}${keys.meta}`;
    const [store] = (await redis.sendCommand(new (commandClass())('hmget', [untagged, 'store']))) as (string | null)[];
    if (store !== null) {
      throw new ConfigError(
        `the Redis of ${describeRedis(redis)} holds 1 partition (a queue with the seed's key names), not ${partitions.count}: set --partitions / OUTBOX_PARTITIONS to 1 on every relay and consumer of this store, or start Redis over (outbox init --force) to partition it`,
      );
    }
  }
  if (partitions.count === 1 && partitionTagOfConnection(partitions.clients[0]) === '') {
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
