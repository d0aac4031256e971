import { createRequire } from 'node:module';
import type { Cluster, Redis } from 'ioredis';

/** Whether `redis` is a Redis Cluster client (from `connectRedisCluster`), which is typed `Redis`. */
export function isCluster(redis: Redis): boolean {
  return (redis as unknown as { isCluster?: boolean }).isCluster === true;
}

/** The masters of a cluster connection (their own connections: no key prefix), or the connection itself. */
export function mastersOf(redis: Redis): Redis[] {
  return isCluster(redis) ? (redis as unknown as Cluster).nodes('master') : [redis];
}

let keySlot: ((key: string) => number) | undefined;

/** The cluster slot of a full key name (prefix included), as ioredis computes it (its cluster-key-slot). */
export function slotOf(key: string): number {
  // Resolved from ioredis's own location: a dependency of ioredis, not of this package.
  keySlot ??= createRequire(createRequire(import.meta.url).resolve('ioredis'))('cluster-key-slot') as (key: string) => number;
  return keySlot(key);
}
