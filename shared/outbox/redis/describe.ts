import type { Redis } from 'ioredis';
import { isCluster } from './cluster-client.js';
import { namespacePrefixOfConnection, partitionTagOfConnection } from './scan-keys.js';

/**
 * "Redis at host:port" (or "Redis Cluster at host:port,…", its startup nodes) plus its namespace
 * and partition, for messages (never the password).
 */
export function describeRedis(redis: Redis): string {
  const partition = partitionTagOfConnection(redis);
  const namespace = namespacePrefixOfConnection(redis);
  let at: string;
  if (isCluster(redis)) {
    // startupNodes is private in ioredis's types; connectRedisCluster gives it {host, port} objects.
    const nodes = (redis as unknown as { startupNodes: ({ host?: string; port?: number } | string | number)[] }).startupNodes;
    at = `Redis Cluster at ${nodes.map((n) => (typeof n === 'object' ? `${n.host}:${n.port}` : String(n))).join(',')}`;
  } else {
    const { host, port, path } = redis.options;
    at = path ? `Redis at ${path}` : `Redis at ${host}:${port}`;
  }
  const details = [namespace ? `namespace ${namespace.slice(0, -1)}` : '', partition ? `partition ${partition.slice(0, -1)}` : ''].filter(Boolean);
  return details.length > 0 ? `${at} (${details.join(', ')})` : at;
}
