import type { Redis } from 'ioredis';
import { readHeartbeats, type ConsumerHeartbeat } from '../../outbox/consumer/heartbeats.js';
import { keys } from '../../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { Db } from '../../outbox/store/open-database.js';
import { mergeHeartbeats } from '../../operations/status.js';

/** What app.db says, read in one snapshot: PENDING rows, the oldest one's age, every event ever committed. */
export interface StoreCounts {
  pending: number;
  oldestPendingAgeMs: number | null;
  /** The highest outbox id: every event committed so far (pruned ones included). */
  committed: number;
}

/** What Redis says: the queue, what is in flight, what the consumers did (with partitions, summed over them). */
export interface RedisCounts {
  queued: number;
  /** Age of the message at the head of the queue (the next one taken), null when empty or it has no created_at; with partitions, the oldest head's. */
  oldestQueuedAgeMs: number | null;
  /** Messages in the processing lists of the consumers that wrote a heartbeat. */
  inFlight: number;
  enqueued: number;
  applied: number;
  duplicates: number;
  parked: number;
  deadLettered: number;
  retrying: number;
  /** Each consumer's heartbeat, merged over the partitions. */
  consumers: ConsumerHeartbeat[];
  /** Each partition's `outbox:meta` hash (one without partitions): which store it serves. */
  metas: Record<string, string>[];
  /** With several partitions: each one's figures; absent with one. */
  partitions?: PartitionCounts[];
}

/** One partition's row on the page. */
export interface PartitionCounts {
  index: number;
  queued: number;
  inFlight: number;
  applied: number;
  parked: number;
  deadLettered: number;
  /** The consumer holding its lease ("<consumerId>#<token>"), null when none holds it. */
  leaseHolder: string | null;
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

/** One partition's reads (or the one Redis's), in one round. */
async function readPartition(redis: Redis) {
  const consumers = await readHeartbeats(redis);
  const [queued, head, enqueued, stats, parked, deadLettered, retrying, meta, leaseHolder, ...inFlight] = await Promise.all([
    redis.llen(keys.events),
    redis.lindex(keys.events, 0),
    redis.get(keys.enqueued),
    redis.hgetall(keys.stats),
    redis.hlen(keys.parked),
    redis.llen(keys.deadLetter),
    redis.hlen(keys.attempts),
    redis.hgetall(keys.meta),
    redis.get(keys.partitionLease),
    ...consumers.map((c) => redis.llen(keys.processing(c.consumerId))),
  ]);
  return { consumers, queued, head, enqueued: Number(enqueued ?? 0), stats, parked, deadLettered, retrying, meta, leaseHolder, inFlight: inFlight.reduce((sum, n) => sum + n, 0) };
}

/**
 * One round of cheap reads in each partition, at once (no SCAN: the processing lists are found
 * through the heartbeats, so the cost does not grow with the dedupe markers in the keyspace).
 */
export async function readRedisCounts(queues: Redis | Partitions): Promise<RedisCounts> {
  const { count, clients } = partitionsOf(queues);
  const each = await Promise.all(clients.map(readPartition));
  const now = Date.now();
  const total = (pick: (p: (typeof each)[number]) => number) => each.reduce((n, p) => n + pick(p), 0);
  const heads = each.map((p) => createdAtOf(p.head)).filter((at): at is number => at !== null);
  return {
    queued: total((p) => p.queued),
    oldestQueuedAgeMs: heads.length === 0 ? null : Math.max(0, now - Math.min(...heads)),
    inFlight: total((p) => p.inFlight),
    enqueued: total((p) => p.enqueued),
    applied: total((p) => Number(p.stats.applied ?? 0)),
    duplicates: total((p) => Number(p.stats.duplicates ?? 0)),
    parked: total((p) => p.parked),
    deadLettered: total((p) => p.deadLettered),
    retrying: total((p) => p.retrying),
    consumers: mergeHeartbeats(each.map((p) => p.consumers)),
    metas: each.map((p) => p.meta),
    ...(count > 1
      ? {
          partitions: each.map((p, index) => ({
            index,
            queued: p.queued,
            inFlight: p.inFlight,
            applied: Number(p.stats.applied ?? 0),
            parked: p.parked,
            deadLettered: p.deadLettered,
            leaseHolder: p.leaseHolder,
          })),
        }
      : {}),
  };
}
