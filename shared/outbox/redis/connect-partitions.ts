import type { Redis } from 'ioredis';
import { parseClusterNodes } from '../config.js';
import { closeRedis, connectRedis, connectUntilReady, type RedisConnectOptions } from './connect.js';
import { connectRedisCluster } from './connect-cluster.js';
import { connectPartitions, type Partitions } from './partitions.js';

/** Where the queues are: one Redis (`redisUrl`) or a Redis Cluster (`redisCluster`, some of its nodes), and how many partitions. */
export interface RedisTarget {
  redisUrl: string;
  /** `host:port,…`; '' or absent: the Redis of `redisUrl`. */
  redisCluster?: string;
  namespace?: string;
  /** Default 1. */
  partitions?: number;
}

/** Opens one connection to `target` (one partition's when `options.partition` is its tag): a Cluster client or a Redis one. */
export function connectTarget(target: RedisTarget, options: RedisConnectOptions = {}): Promise<Redis> {
  const opts = { namespace: target.namespace, ...options };
  return target.redisCluster ? connectRedisCluster(parseClusterNodes(target.redisCluster), opts) : connectRedis(target.redisUrl, opts);
}

/**
 * For long-running apps, like `connectUntilReady`: retries the first connection until it works or
 * `signal` aborts. On a cluster, ioredis retries by itself once connected.
 */
export async function connectTargetUntilReady(target: RedisTarget, options: Parameters<typeof connectUntilReady>[1]): Promise<Redis> {
  if (!target.redisCluster) return connectUntilReady(target.redisUrl, { namespace: target.namespace, ...options });
  const { sleep } = await import('../sleep.js');
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await connectTarget(target, { reconnect: true, ...options });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const delayMs = Math.min(2000, 100 * 2 ** attempt);
      options.log.warn('redis cluster unavailable, retrying', { attempt, delayMs, error: (error as Error).message });
      await sleep(delayMs, options.signal);
    }
  }
}

/** The partitions of `target`, each on its own connection (see partitions.ts); `connect` opens one given the options. */
export function connectTargetPartitions(target: RedisTarget, connect: (options: RedisConnectOptions) => Promise<Redis>): Promise<Partitions> {
  return connectPartitions(target.partitions ?? 1, Boolean(target.redisCluster), (partition) => connect({ partition }));
}

/** Closes every partition's connection. */
export async function closePartitions(partitions: Partitions): Promise<void> {
  await Promise.all(partitions.clients.map((redis) => closeRedis(redis)));
}
