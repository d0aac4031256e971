import type { Redis } from 'ioredis';
import { keyPrefixOfConnection } from './scan-keys.js';

/** "Redis at host:port" plus its namespace, for messages (never the password). */
export function describeRedis(redis: Redis): string {
  const { host, port, path } = redis.options;
  const prefix = keyPrefixOfConnection(redis);
  const at = path ? `Redis at ${path}` : `Redis at ${host}:${port}`;
  return prefix ? `${at} (namespace ${prefix.slice(0, -1)})` : at;
}
