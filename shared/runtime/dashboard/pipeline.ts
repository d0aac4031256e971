import type { Redis } from 'ioredis';
import { readHeartbeats, type ConsumerHeartbeat } from '../../outbox/consumer/heartbeats.js';
import { keys } from '../../outbox/redis/keys.js';
import type { Db } from '../../outbox/store/open-database.js';

/** What app.db says, read in one snapshot: PENDING rows, the oldest one's age, every event ever committed. */
export interface StoreCounts {
  pending: number;
  oldestPendingAgeMs: number | null;
  /** The highest outbox id: every event committed so far (pruned ones included). */
  committed: number;
}

/** What Redis says: the queue, what is in flight, what the consumers did. */
export interface RedisCounts {
  queued: number;
  /** Age of the message at the head of the queue (the next one taken), null when empty or it has no created_at. */
  oldestQueuedAgeMs: number | null;
  /** Messages in the processing lists of the consumers that wrote a heartbeat. */
  inFlight: number;
  enqueued: number;
  applied: number;
  duplicates: number;
  parked: number;
  deadLettered: number;
  retrying: number;
  consumers: ConsumerHeartbeat[];
  /** The `outbox:meta` hash: which store this Redis serves. */
  meta: Record<string, string>;
}

export function readStoreCounts(db: Db, now: number): StoreCounts {
  const pending = db
    .prepare<[], { n: number; oldest: number | null }>("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox WHERE status = 'PENDING'")
    .get()!;
  const committed = (db.prepare('SELECT MAX(id) FROM outbox').pluck().get() as number | null) ?? 0;
  return { pending: pending.n, oldestPendingAgeMs: pending.oldest === null ? null : Math.max(0, now - pending.oldest), committed };
}

function createdAtOf(message: string | null): number | null {
  if (message === null) return null;
  try {
    const createdAt = (JSON.parse(message) as { created_at?: unknown }).created_at;
    return typeof createdAt === 'number' ? createdAt : null;
  } catch {
    return null;
  }
}

/**
 * One round of cheap reads (no SCAN: the processing lists are found through the heartbeats, so the
 * cost does not grow with the dedupe markers in the keyspace).
 */
export async function readRedisCounts(redis: Redis): Promise<RedisCounts> {
  const consumers = await readHeartbeats(redis);
  const [queued, head, enqueued, stats, parked, deadLettered, retrying, meta, ...inFlight] = await Promise.all([
    redis.llen(keys.events),
    redis.lindex(keys.events, 0),
    redis.get(keys.enqueued),
    redis.hgetall(keys.stats),
    redis.hlen(keys.parked),
    redis.llen(keys.deadLetter),
    redis.hlen(keys.attempts),
    redis.hgetall(keys.meta),
    ...consumers.map((c) => redis.llen(keys.processing(c.consumerId))),
  ]);
  const now = Date.now();
  const createdAt = createdAtOf(head);
  return {
    queued,
    oldestQueuedAgeMs: createdAt === null ? null : Math.max(0, now - createdAt),
    inFlight: inFlight.reduce((sum, n) => sum + n, 0),
    enqueued: Number(enqueued ?? 0),
    applied: Number(stats.applied ?? 0),
    duplicates: Number(stats.duplicates ?? 0),
    parked,
    deadLettered,
    retrying,
    consumers,
    meta,
  };
}
