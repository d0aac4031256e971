import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { Db } from '../db/open-database.js';
import { OutboxError } from '../errors/outbox-error.js';
import { toMessage, type OutboxRow } from '../events.js';
import { keys } from '../redis/keys.js';

export interface RelayOptions {
  /** Rows per batch: one SELECT, one MULTI (variadic RPUSH + INCRBY), one UPDATE transaction. Default 1000. */
  batchSize?: number;
}

export interface RelayBatch {
  count: number;
  firstId: number;
  lastId: number;
  durationMs: number;
}

export const DEFAULT_RELAY_BATCH_SIZE = 1000;

/**
 * Moves PENDING outbox rows onto `outbox.events`, oldest id first, and marks them PUBLISHED only
 * after Redis acknowledged the push. A crash between push and mark re-pushes the batch on the next
 * pass: duplicates, never loss. Per-aggregate order holds even with overlapping relays, because a
 * batch is always the lowest PENDING ids and rows are marked only after they were pushed.
 */
export function createRelay(db: Db, redis: Redis, options: RelayOptions = {}) {
  const batchSize = options.batchSize ?? DEFAULT_RELAY_BATCH_SIZE;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new OutboxError(`relay batch size must be a positive integer, got ${batchSize}`, 2);
  }
  // The partial index holds (status, rowid): WHERE status='PENDING' ORDER BY id reads it in order, no sort.
  const selectPending = db.prepare<[number, number], OutboxRow>(
    "SELECT id, event_id, aggregate_id, seq, event_type, payload FROM outbox WHERE status = 'PENDING' AND id > ? ORDER BY id LIMIT ?",
  );
  // Exactly the rows of the batch, in one statement. (A range UPDATE could also mark a row that a
  // concurrent replay set back to PENDING after the SELECT, without pushing it again.)
  const markRows = db.prepare<[number, string]>(
    "UPDATE outbox SET status = 'PUBLISHED', published_at = ? WHERE id IN (SELECT value FROM json_each(?)) AND status = 'PENDING'",
  );
  const markPublished = db.transaction((rows: OutboxRow[], now: number) => {
    const half = rows.length >> 1;
    markRows.run(now, JSON.stringify(rows.slice(0, half).map((row) => row.id)));
    crashPoint('relay.mid-batch', () => `crash point relay.mid-batch: dying with rows ${rows[0].id}-${rows[half - 1]?.id ?? rows[0].id} marked, uncommitted`);
    markRows.run(now, JSON.stringify(rows.slice(half).map((row) => row.id)));
  });

  async function push(rows: OutboxRow[]): Promise<void> {
    try {
      const replies = await redis
        .multi()
        .rpush(keys.events, ...rows.map(toMessage))
        .incrby(keys.enqueued, rows.length)
        .exec();
      if (!replies) throw new Error('MULTI was aborted');
      for (const [error] of replies) if (error) throw error;
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new OutboxError(`cannot relay outbox rows ${rows[0].id}-${rows[rows.length - 1].id}: ${reason}`, 5);
    }
    crashPoint('relay.after-push', () => `crash point relay.after-push: pushed rows ${rows[0].id}-${rows[rows.length - 1].id}, dying before marking them PUBLISHED`);
  }

  function summary(rows: OutboxRow[], started: number): RelayBatch {
    return { count: rows.length, firstId: rows[0].id, lastId: rows[rows.length - 1].id, durationMs: performance.now() - started };
  }

  /**
   * Relays until no row is PENDING. Pipelined: once batch N's push is acknowledged, batch N+1 is
   * read and its push sent, and batch N is marked while that push is in flight. Still, a row is
   * marked only after its own push was acknowledged, and pushes go out in id order. After
   * `deadline` (ms since epoch) no new batch is started.
   */
  async function relayAll(onBatch?: (batch: RelayBatch) => void, deadline = Infinity): Promise<{ batches: number; events: number }> {
    let batches = 0;
    let events = 0;
    let started = performance.now();
    let rows = selectPending.all(0, batchSize);
    if (rows.length === 0) return { batches, events };
    let pushing: Promise<void> = push(rows);
    for (;;) {
      await pushing;
      const next = Date.now() < deadline ? selectPending.all(rows[rows.length - 1].id, batchSize) : [];
      const nextStarted = performance.now();
      if (next.length > 0) {
        pushing = push(next);
        // Let ioredis write the next push to the socket before the synchronous UPDATE below.
        await new Promise((resolve) => setImmediate(resolve));
      }
      try {
        markPublished.immediate(rows, Date.now());
      } finally {
        if (next.length > 0) pushing.catch(() => {});
      }
      batches += 1;
      events += rows.length;
      onBatch?.(summary(rows, started));
      if (next.length === 0) return { batches, events };
      rows = next;
      started = nextStarted;
    }
  }

  return { relayAll };
}

export type Relay = ReturnType<typeof createRelay>;
