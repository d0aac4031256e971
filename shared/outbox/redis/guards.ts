import type { ChainableCommander, Redis } from 'ioredis';
import { createHash } from 'node:crypto';
import { keys } from './keys.js';
import { migrateGuardsOnce } from './scripts.js';

/**
 * Seq guards (aggregate -> last applied seq) in up to 65,536 bucket hashes that Redis keeps as
 * listpacks; lua/includes/guards.lua is the scripts' side and picks the same bucket. The hash
 * `keys.appliedSeq` itself is the layout before buckets: read where a bucket lacks a guard until
 * `migrateGuards` empties it.
 */
export const GUARD_BUCKETS = 65_536;

/** Bucket hashes read per round trip by `scanGuards`: each holds a few hundred fields at most. */
const BUCKETS_PER_READ = 256;

/** The bucket (4 hex digits) of an aggregate: the first 16 bits of its SHA-1, as Lua's redis.sha1hex gives. */
export function guardBucketOf(aggregate: string): string {
  return createHash('sha1').update(aggregate).digest('hex').slice(0, 4);
}

/** The key (relative to the namespace) of the bucket that holds an aggregate's guard. */
export function guardKeyOf(aggregate: string): string {
  return `${keys.appliedSeq}:${guardBucketOf(aggregate)}`;
}

/** The key of bucket number `index` (0 … GUARD_BUCKETS - 1). */
export function bucketKey(index: number): string {
  return `${keys.appliedSeq}:${index.toString(16).padStart(4, '0')}`;
}

/**
 * Queues the read of `aggregates`' guards on a MULTI or pipeline (so that they are read at one
 * instant with whatever else it reads), one script call (read-guards-1.lua) for all of them, or,
 * on a client without the project's scripts, an HGET each and the old layout's HMGET. Resolves how
 * many replies it queued, for `guardsOfReplies`.
 */
export function queueGuardReads(commands: ChainableCommander, aggregates: readonly string[]): number {
  if (aggregates.length === 0) return 0;
  const withScripts = commands as unknown as { readGuards?: (...args: string[]) => unknown };
  if (typeof withScripts.readGuards === 'function') {
    withScripts.readGuards(keys.appliedSeq, ...aggregates);
    return 1;
  }
  for (const aggregate of aggregates) commands.hget(guardKeyOf(aggregate), aggregate);
  commands.hmget(keys.appliedSeq, ...aggregates);
  return aggregates.length + 1;
}

/**
 * Queues a change of an existing guard (verify --repair lowering one) on a MULTI: its bucket's
 * field written, the old layout's field dropped. Not for a new guard: the count would miss it.
 */
export function queueGuardChange(commands: ChainableCommander, aggregate: string, seq: number): void {
  commands.hset(guardKeyOf(aggregate), aggregate, String(seq)).hdel(keys.appliedSeq, aggregate);
}

/** The guards from the replies `queueGuardReads` queued, in its order (null where none). */
export function guardsOfReplies(replies: readonly unknown[], aggregates: readonly string[]): (string | null)[] {
  if (replies.length > 1) {
    const legacy = (replies[aggregates.length] ?? []) as (string | null)[];
    return aggregates.map((_, i) => (replies[i] as string | null) ?? legacy[i] ?? null);
  }
  const values = (replies[0] ?? []) as (string | null)[];
  return aggregates.map((_, i) => values[i] ?? null);
}

/** Each aggregate's guard (null where none), in order, in one round trip (a call per 1,000). */
export async function readGuards(redis: Redis, aggregates: readonly string[]): Promise<(string | null)[]> {
  if (aggregates.length === 0) return [];
  const pipeline = redis.pipeline();
  const counts: number[] = [];
  for (let first = 0; first < aggregates.length; first += 1000) counts.push(queueGuardReads(pipeline, aggregates.slice(first, first + 1000)));
  const replies = (await pipeline.exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0]!;
  let at = 0;
  return counts.flatMap((count, k) => {
    const values = replies.slice(at, (at += count)).map(([, reply]) => reply);
    return guardsOfReplies(values, aggregates.slice(k * 1000, (k + 1) * 1000));
  });
}

/** One aggregate's guard, null when none. */
export async function readGuard(redis: Redis, aggregate: string): Promise<string | null> {
  return (await readGuards(redis, [aggregate]))[0];
}

/**
 * Every guard, in chunks of [aggregate, seq text] pairs: the buckets a few hundred per round trip,
 * then the hash of the layout before buckets by HSCAN. No call reads more than one small hash.
 */
export async function* scanGuards(redis: Redis): AsyncGenerator<[string, string][]> {
  for (let first = 0; first < GUARD_BUCKETS; first += BUCKETS_PER_READ) {
    const pipeline = redis.pipeline();
    for (let i = first; i < first + BUCKETS_PER_READ; i += 1) pipeline.hgetall(bucketKey(i));
    const chunk: [string, string][] = [];
    for (const [error, reply] of (await pipeline.exec()) ?? []) {
      if (error) throw error;
      for (const [aggregate, seq] of Object.entries(reply as Record<string, string>)) chunk.push([aggregate, seq]);
    }
    if (chunk.length > 0) yield chunk;
  }
  let cursor = '0';
  do {
    const [next, flat] = await redis.hscan(keys.appliedSeq, cursor, 'COUNT', 500);
    cursor = next;
    const chunk: [string, string][] = [];
    for (let i = 0; i < flat.length; i += 2) chunk.push([flat[i], flat[i + 1]]);
    if (chunk.length > 0) yield chunk;
  } while (cursor !== '0');
}

/** How many guards there are: the count the scripts keep (buckets) plus the old layout's fields. */
export async function countGuards(redis: Redis): Promise<number> {
  const [counted, legacy] = await Promise.all([redis.hget(keys.window, 'guards'), redis.hlen(keys.appliedSeq)]);
  return Math.max(0, Number(counted ?? 0) || 0) + legacy;
}

/**
 * Bytes per guard, from the buckets of a sample of aggregates (MEMORY USAGE of each over its HLEN,
 * key overhead included) and 16 fixed ones; null when they hold none. The old layout's hash counts
 * with its own bytes.
 */
export async function guardBytesPerAggregate(redis: Redis, sample: readonly string[] = []): Promise<number | null> {
  const pipeline = redis.pipeline();
  const buckets = new Set(sample.map(guardKeyOf));
  for (let i = 0; i < 16; i += 1) buckets.add(bucketKey(i * (GUARD_BUCKETS / 16)));
  for (const key of buckets) pipeline.hlen(key).memory('USAGE', key);
  pipeline.hlen(keys.appliedSeq).memory('USAGE', keys.appliedSeq, 'SAMPLES', '5');
  let fields = 0;
  let bytes = 0;
  const replies = (await pipeline.exec()) ?? [];
  for (let i = 0; i < replies.length; i += 2) {
    fields += Number(replies[i][1] ?? 0);
    bytes += Number(replies[i + 1][1] ?? 0);
  }
  return fields === 0 ? null : bytes / fields;
}

/**
 * Sets guards from outside the scripts (tools and benches that build state in bulk) and counts the
 * new ones. Not atomic: for state no consumer is applying to.
 */
export async function setGuards(redis: Redis, pairs: readonly (readonly [string, string | number])[]): Promise<void> {
  const byBucket = new Map<string, string[]>();
  for (const [aggregate, seq] of pairs) {
    const key = guardKeyOf(aggregate);
    const list = byBucket.get(key);
    if (list) list.push(aggregate, String(seq));
    else byBucket.set(key, [aggregate, String(seq)]);
  }
  const pipeline = redis.pipeline();
  for (const [key, flat] of byBucket) pipeline.hset(key, ...flat);
  let added = 0;
  for (const [error, reply] of (await pipeline.exec()) ?? []) {
    if (error) throw error;
    added += Number(reply);
  }
  if (added > 0) await redis.hincrby(keys.window, 'guards', added);
}

/** Unlinks every bucket (a rebuild's or a test's reset), 1,024 names per call. */
export async function unlinkGuards(redis: Redis): Promise<void> {
  for (let first = 0; first < GUARD_BUCKETS; first += 1024) {
    const names = Array.from({ length: 1024 }, (_, i) => bucketKey(first + i));
    await redis.unlink(...names);
  }
  await redis.multi().unlink(keys.appliedSeq).hdel(keys.window, 'guards').exec();
}

/** Moves the old layout's guards into buckets, a few hundred per call, until none is left. */
export async function migrateGuards(redis: Redis): Promise<number> {
  let moved = 0;
  for (;;) {
    const [count, more] = await migrateGuardsOnce(redis, 500);
    moved += count;
    if (more === 0) return moved;
  }
}
