import type { Redis } from 'ioredis';

/** The key prefix (namespace) of a connection: ioredis adds it to every key a command names. */
export function keyPrefixOfConnection(redis: Redis): string {
  return String(redis.options.keyPrefix ?? '');
}

/**
 * The keys matching `pattern` within the connection's namespace, without the prefix (so they can be
 * passed to commands, which add it again). SCAN is the one place where ioredis does not add it.
 */
export async function* scanKeys(redis: Redis, pattern: string): AsyncGenerator<string> {
  const prefix = keyPrefixOfConnection(redis);
  for await (const batch of redis.scanStream({ match: prefix + pattern, count: 1000 })) {
    for (const key of batch as string[]) yield key.slice(prefix.length);
  }
}

/** Deletes (UNLINK, 1000 at a time) every key `found` yields, e.g. from `scanKeys`; resolves how many. */
export async function unlinkAll(redis: Redis, found: AsyncIterable<string>): Promise<number> {
  let deleted = 0;
  let batch: string[] = [];
  for await (const key of found) {
    batch.push(key);
    if (batch.length === 1000) {
      deleted += await redis.unlink(...batch);
      batch = [];
    }
  }
  if (batch.length > 0) deleted += await redis.unlink(...batch);
  return deleted;
}
