import type { Redis } from 'ioredis';
import { keys, projectKeyPatterns } from './keys.js';
import { partitionsOf, type Partitions } from './partitions.js';
import { keyPrefixOfConnection, scanKeys, unlinkAll } from './scan-keys.js';

/**
 * Every key this project owns in the connection's namespace (and no other), without the prefix:
 * its own keys and, outside a namespace (where '*' covers them), the keys effects wrote.
 */
export async function* projectKeys(redis: Redis): AsyncGenerator<string> {
  const prefix = keyPrefixOfConnection(redis);
  if (prefix === '') {
    const effectKeys = await redis.smembers(keys.effectKeys);
    yield* effectKeys;
  }
  for (const pattern of projectKeyPatterns(prefix)) yield* scanKeys(redis, pattern);
}

/**
 * Deletes every key this project owns in the connection's namespace (and no other), in every
 * partition (the consumers' members are in partition 0's); resolves how many.
 */
export async function clearProjectKeys(redis: Redis | Partitions): Promise<number> {
  let deleted = 0;
  for (const client of partitionsOf(redis).clients) deleted += await unlinkAll(client, projectKeys(client));
  return deleted;
}
