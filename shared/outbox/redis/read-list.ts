import type { Redis } from 'ioredis';

/** Reads a list front to back in chunks, without changing it. */
export async function* readList(redis: Redis, key: string, chunk = 1000): AsyncGenerator<string> {
  for (let start = 0; ; start += chunk) {
    const items = await redis.lrange(key, start, start + chunk - 1);
    yield* items;
    if (items.length < chunk) return;
  }
}

/**
 * Reads a list that others change meanwhile, back to front in chunks (negative indexes): every item
 * that stays in it while it is read is read, some maybe twice, as long as the others take from its
 * head and add at either end, which is how the queue and the processing lists change (a take, an
 * ack, a push, a parked event queued again). Front to back, each take from the head shifts every
 * offset not read yet, and the items it shifts past are never read.
 */
export async function* readListBackwards(redis: Redis, key: string, chunk = 1000): AsyncGenerator<string> {
  for (let end = -1; ; end -= chunk) {
    const items = await redis.lrange(key, end - chunk + 1, end);
    for (let i = items.length - 1; i >= 0; i -= 1) yield items[i];
    if (items.length < chunk) return;
  }
}
