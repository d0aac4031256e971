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
  const selectPending = db.prepare<[number], OutboxRow>(
    "SELECT id, event_id, aggregate_id, seq, event_type, payload FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT ?",
  );
  const markOne = db.prepare<[number, number]>(
    "UPDATE outbox SET status = 'PUBLISHED', published_at = ? WHERE id = ? AND status = 'PENDING'",
  );
  const markPublished = db.transaction((rows: OutboxRow[], now: number) => {
    const half = rows.length >> 1;
    rows.forEach((row, index) => {
      markOne.run(now, row.id);
      if (index === half) crashPoint('relay.mid-batch', () => `crash point relay.mid-batch: dying with rows ${rows[0].id}-${row.id} marked, uncommitted`);
    });
  });

  async function push(rows: OutboxRow[]): Promise<void> {
    const replies = await redis
      .multi()
      .rpush(keys.events, ...rows.map(toMessage))
      .incrby(keys.enqueued, rows.length)
      .exec();
    if (!replies) throw new Error('MULTI was aborted');
    for (const [error] of replies) if (error) throw error;
  }

  /** Relays one batch; resolves null when no row is PENDING. */
  async function relayBatch(): Promise<RelayBatch | null> {
    const started = performance.now();
    const rows = selectPending.all(batchSize);
    if (rows.length === 0) return null;
    const firstId = rows[0].id;
    const lastId = rows[rows.length - 1].id;
    try {
      await push(rows);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new OutboxError(`cannot relay outbox rows ${firstId}-${lastId}: ${reason}`, 5);
    }
    crashPoint('relay.after-push', () => `crash point relay.after-push: pushed rows ${firstId}-${lastId}, dying before marking them PUBLISHED`);
    markPublished.immediate(rows, Date.now());
    return { count: rows.length, firstId, lastId, durationMs: performance.now() - started };
  }

  /** Relays until no PENDING row is left (or `maxBatches` batches). */
  async function relayAll(onBatch?: (batch: RelayBatch) => void, maxBatches = Infinity) {
    let events = 0;
    let batches = 0;
    while (batches < maxBatches) {
      const batch = await relayBatch();
      if (!batch) break;
      batches += 1;
      events += batch.count;
      onBatch?.(batch);
    }
    return { batches, events };
  }

  return { relayBatch, relayAll };
}

export type Relay = ReturnType<typeof createRelay>;
