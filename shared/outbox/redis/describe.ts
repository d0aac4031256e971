import type { Redis } from 'ioredis';
import { isCluster } from './cluster-client.js';
import { keyPrefixOfConnection } from './scan-keys.js';

/** A partition's part of a key prefix: the trailing hash tag and ':' (namespaces contain no '{'). */
const PARTITION_SUFFIX = /\{[^{}]+\}:$/;

/**
 * "Redis at host:port" (or "Redis Cluster at host:port,…", its startup nodes) plus its namespace
 * and partition, for messages (never the password).
 */
export function describeRedis(redis: Redis): string {
  const prefix = keyPrefixOfConnection(redis);
  const partition = PARTITION_SUFFIX.exec(prefix)?.[0] ?? '';
  const namespace = prefix.slice(0, prefix.length - partition.length);
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
