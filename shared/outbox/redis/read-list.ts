import type { Redis } from 'ioredis';

/** Reads a list front to back in chunks, without changing it. */
export async function* readList(redis: Redis, key: string, chunk = 1000): AsyncGenerator<string> {
  for (let start = 0; ; start += chunk) {
    const items = await redis.lrange(key, start, start + chunk - 1);
    yield* items;
    if (items.length < chunk) return;
  }
}
