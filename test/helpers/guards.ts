import type { Redis } from 'ioredis';
import { bucketKey, GUARD_BUCKETS, guardKeyOf } from '../../shared/outbox/redis/guards.js';

/**
 * The seq guards as tests see them, through a client without a key prefix (`prefix` is what the
 * consumers' connection put in front: a namespace, a partition's hash tag). They live in bucket
 * hashes (shared/outbox/redis/guards.ts); the hash `outbox:applied-seq` is the layout before buckets.
 */
const BASE = 'outbox:applied-seq';

/** One aggregate's guard, null when none (its bucket first, then the old layout's hash). */
export async function guardOf(client: Redis, aggregate: string, prefix = ''): Promise<string | null> {
  return (await client.hget(prefix + guardKeyOf(aggregate), aggregate)) ?? (await client.hget(prefix + BASE, aggregate));
}

/** Every guard, aggregate -> seq text. */
export async function guardsOf(client: Redis, prefix = ''): Promise<Record<string, string>> {
  const all: Record<string, string> = { ...(await client.hgetall(prefix + BASE)) };
  for (let first = 0; first < GUARD_BUCKETS; first += 1024) {
    const pipeline = client.pipeline();
    for (let i = first; i < first + 1024; i += 1) pipeline.hgetall(prefix + bucketKey(i));
    for (const [, reply] of (await pipeline.exec()) ?? []) Object.assign(all, reply as Record<string, string>);
  }
  return all;
}

/** How many guards there are. */
export async function guardCount(client: Redis, prefix = ''): Promise<number> {
  return Object.keys(await guardsOf(client, prefix)).length;
}

/** Writes a guard where the scripts keep it (a test's fault: a value of its choice, counted or not). */
export async function setGuard(client: Redis, aggregate: string, seq: string, prefix = ''): Promise<void> {
  await client.hset(prefix + guardKeyOf(aggregate), aggregate, seq);
}

/** Deletes one aggregate's guard. */
export async function dropGuard(client: Redis, aggregate: string, prefix = ''): Promise<void> {
  await client.hdel(prefix + guardKeyOf(aggregate), aggregate);
  await client.hdel(prefix + BASE, aggregate);
}

/** Deletes every guard (Redis lost them), their count with them. */
export async function dropAllGuards(client: Redis, prefix = ''): Promise<void> {
  for (let first = 0; first < GUARD_BUCKETS; first += 1024) {
    await client.unlink(...Array.from({ length: 1024 }, (_, i) => prefix + bucketKey(first + i)));
  }
  await client.unlink(prefix + BASE);
  await client.hdel(prefix + 'outbox:window', 'guards');
}
