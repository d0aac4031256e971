import type { Redis } from 'ioredis';
import { parseClusterNodes } from '../config.js';
import { closeRedis, connectRedis, connectUntilReady, type RedisConnectOptions } from './connect.js';
import { connectClusterUntilReady, connectRedisCluster } from './connect-cluster.js';
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

/** For long-running apps, like `connectUntilReady` (on a cluster `connectClusterUntilReady`): retries the first connection until it works or `signal` aborts. */
export function connectTargetUntilReady(target: RedisTarget, options: Parameters<typeof connectUntilReady>[1]): Promise<Redis> {
  const opts = { namespace: target.namespace, ...options };
  return target.redisCluster ? connectClusterUntilReady(parseClusterNodes(target.redisCluster), opts) : connectUntilReady(target.redisUrl, opts);
}

/** The partitions of `target`, each on its own connection (see partitions.ts); `connect` opens one given the options. */
export function connectTargetPartitions(target: RedisTarget, connect: (options: RedisConnectOptions) => Promise<Redis>): Promise<Partitions> {
  return connectPartitions(target.partitions ?? 1, Boolean(target.redisCluster), (partition) => connect({ partition }));
}

/** Closes every partition's connection. */
export async function closePartitions(partitions: Partitions): Promise<void> {
  await Promise.all(partitions.clients.map((redis) => closeRedis(redis)));
}
