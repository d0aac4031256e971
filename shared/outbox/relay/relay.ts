import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { Statement } from 'better-sqlite3';
import type { Db } from '../store/open-database.js';
import { replayGenerationReader, storeIdOf } from '../store/store-meta.js';
import { OutboxError } from '../errors/outbox-error.js';
import type { OutboxRow } from '../store/events.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { ensurePaired, mismatch, type Pairing } from './store-pairing.js';
import { pushRows } from './push-rows.js';
import type { OutboxMetrics } from '../metrics/outbox-metrics.js';

export interface RelayOptions {
  /** Rows per batch: one SELECT, one push script (RPUSH + INCRBY), one UPDATE transaction. Default 1000. */
  batchSize?: number;
  /** Told when the relay claimed a Redis for its store or rebuilt one that lost its state. */
  onPairing?: (pairing: Exclude<Pairing, { kind: 'paired' }>) => void;
  /** Throws when app.db is no longer the file at its path; checked before claiming a Redis. Default: never. */
  assertLive?: () => void;
  /** Counts each batch (events pushed, its duration) and each Redis state loss found (`createOutboxMetrics`). Default none. */
  metrics?: Pick<OutboxMetrics, 'relayStarted' | 'batchRelayed' | 'stateLost'>;
}

/**
 * The relay's two statements on app.db: `outbox bench` times them alone (no Redis) as the relay's
 * SQLite bound.
 */
export function relayStatements(db: Db): { selectPending: Statement<[number, number], OutboxRow>; markRows: Statement<[number, string]> } {
  return {
    // The partial index holds (status, rowid): WHERE status='PENDING' ORDER BY id reads it in order, no sort.
    selectPending: db.prepare<[number, number], OutboxRow>(
      "SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at FROM outbox WHERE status = 'PENDING' AND id > ? ORDER BY id LIMIT ?",
    ),
    // Exactly the rows of the batch, in one statement. (A range UPDATE could also mark a row that a
    // concurrent replay set back to PENDING after the SELECT, without pushing it again.)
    markRows: db.prepare<[number, string]>(
      "UPDATE outbox SET status = 'PUBLISHED', published_at = ? WHERE id IN (SELECT value FROM json_each(?)) AND status = 'PENDING'",
    ),
  };
}

/** Redis lost its state between two pushes: the pass stops and the relay pairs again. */
class StateLostError extends Error {}

export interface RelayBatch {
  count: number;
  firstId: number;
  lastId: number;
  durationMs: number;
}

export const DEFAULT_RELAY_BATCH_SIZE = 1000;

export interface RelayAllOptions {
  /** Told after each batch was marked PUBLISHED. */
  onBatch?: (batch: RelayBatch) => void;
  /** After this time (ms since epoch) no new batch is started. Default: never. */
  deadline?: number;
  /**
   * Called before every push and every mark (and before pairing); throwing stops the pass there.
   * The relay app checks that it still holds its job lock, so a relay that lost it writes nothing more.
   */
  beforeWrite?: () => void;
}

/** A batch Redis acknowledged whose mark failed (app.db locked or full): marked before anything is pushed again. */
interface UnmarkedBatch {
  rows: OutboxRow[];
  generation: number;
  started: number;
  /** Redis's clock when the push reached the queue: the rows' published_at. */
  pushedAt: number;
}

/**
 * Moves PENDING outbox rows onto `outbox.events` (with partitions, each row onto its aggregate's
 * partition's queue), oldest id first, and marks them PUBLISHED only after Redis acknowledged the
 * push. A crash between push and mark re-pushes the batch on the next pass: duplicates, never loss.
 * Per-aggregate order holds even with overlapping relays, because a batch is always the lowest
 * PENDING ids and rows are marked only after they were pushed.
 */
export function createRelay(db: Db, redis: Redis | Partitions, options: RelayOptions = {}) {
  const partitions = partitionsOf(redis);
  const batchSize = options.batchSize ?? DEFAULT_RELAY_BATCH_SIZE;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new OutboxError(`relay batch size must be a positive integer, got ${batchSize}`, 2);
  }
  const { selectPending, markRows } = relayStatements(db);
  const storeId = storeIdOf(db);
  const replayGeneration = replayGenerationReader(db);
  options.metrics?.relayStarted();
  /**
   * Marks the rows, unless a replay, repair or rebuild set rows back to PENDING since the pass read
   * `generation`: those rows may be among these, and they must be pushed again, not marked (a
   * relay paused between push and mark would otherwise undo the replay). Resolves false then.
   */
  const markPublished = db.transaction((rows: OutboxRow[], pushedAt: number, generation: number): boolean => {
    if (replayGeneration() !== generation) return false;
    const half = rows.length >> 1;
    markRows.run(pushedAt, JSON.stringify(rows.slice(0, half).map((row) => row.id)));
    crashPoint('relay.mid-batch', () => `crash point relay.mid-batch: dying with rows ${rows[0].id}-${rows[half - 1]?.id ?? rows[0].id} marked, uncommitted`);
    markRows.run(pushedAt, JSON.stringify(rows.slice(half).map((row) => row.id)));
    return true;
  });

  /** Pushes `rows`; resolves Redis's clock when they reached the queue (their published_at). */
  async function push(rows: OutboxRow[]): Promise<number> {
    const result = await pushRows(partitions, storeId, rows);
    if (result.status === 'unclaimed') throw new StateLostError();
    if (result.status === 'foreign') throw mismatch(db, result.redis, storeId, result.servedStore);
    crashPoint('relay.after-push', () => `crash point relay.after-push: pushed rows ${rows[0].id}-${rows[rows.length - 1].id}, dying before marking them PUBLISHED`);
    return result.pushedAt;
  }

  function summary(rows: OutboxRow[], started: number): RelayBatch {
    return { count: rows.length, firstId: rows[0].id, lastId: rows[rows.length - 1].id, durationMs: performance.now() - started };
  }

  let paired = false;

  /**
   * Checks that Redis serves this store (claiming it on first use, rebuilding it when it lost its
   * state); the relay calls it before its first push and again whenever a push finds no store.
   */
  async function pair(): Promise<Pairing> {
    const pairing = await ensurePaired(db, partitions, options.assertLive);
    paired = true;
    if (pairing.kind === 'rebuilt') options.metrics?.stateLost();
    if (pairing.kind !== 'paired') options.onPairing?.(pairing);
    return pairing;
  }

  /** Pushed, not yet marked: the mark failed (app.db locked, disk full) and is retried first. */
  let unmarked: UnmarkedBatch[] = [];

  /**
   * Relays until no row is PENDING. Pipelined: once batch N's push is acknowledged, batch N+1 is
   * read and its push sent, and batch N is marked while that push is in flight. Still, a row is
   * marked only after its own push was acknowledged, and pushes go out in id order. When a push finds
   * that Redis lost its state, the relay rebuilds it (see `ensurePaired`) and starts over from the
   * lowest PENDING id. When a mark fails (SQLITE_BUSY, SQLITE_FULL, …), the error is thrown and
   * the batches Redis acknowledged are remembered: the next call marks them before it pushes
   * anything, so waiting out a locked or full app.db re-pushes nothing.
   */
  async function relayAll({ onBatch, deadline = Infinity, beforeWrite }: RelayAllOptions = {}): Promise<{ batches: number; events: number }> {
    const total = { batches: 0, events: 0 };
    while (unmarked.length > 0) {
      beforeWrite?.();
      const { rows, generation, started, pushedAt } = unmarked[0];
      const marked = markPublished.immediate(rows, pushedAt, generation);
      unmarked.shift();
      // Not marked: a replay set rows back to PENDING since; the pass below pushes them again.
      if (marked) count(total, rows, started, onBatch);
    }
    for (let attempt = 1; ; attempt += 1) {
      if (!paired) {
        beforeWrite?.();
        await pair();
      }
      try {
        return await relayPass(total, { onBatch, deadline, beforeWrite });
      } catch (error) {
        if (!(error instanceof StateLostError) || attempt === 3) {
          if (error instanceof StateLostError) throw new OutboxError('Redis keeps losing its state while the relay rebuilds it: check its persistence and maxmemory-policy', 5);
          throw error;
        }
        paired = false;
      }
    }
  }

  function count(total: { batches: number; events: number }, rows: OutboxRow[], started: number, onBatch: RelayAllOptions['onBatch']): void {
    total.batches += 1;
    total.events += rows.length;
    const batch = summary(rows, started);
    options.metrics?.batchRelayed(batch.count, batch.durationMs / 1000);
    onBatch?.(batch);
  }

  /**
   * Marks `batch`; when that fails, remembers it as unmarked, and `inFlight` too once Redis
   * acknowledged its push, then throws.
   */
  async function markOrOwe(batch: UnmarkedBatch, inFlight?: { batch: Omit<UnmarkedBatch, 'pushedAt'>; pushing: Promise<number> }): Promise<boolean> {
    try {
      return markPublished.immediate(batch.rows, batch.pushedAt, batch.generation);
    } catch (error) {
      unmarked = [batch];
      const pushedAt = await inFlight?.pushing.catch(() => undefined);
      if (inFlight && pushedAt !== undefined) unmarked.push({ ...inFlight.batch, pushedAt });
      throw error;
    }
  }

  async function relayPass(
    total: { batches: number; events: number },
    { onBatch, deadline = Infinity, beforeWrite }: RelayAllOptions,
  ): Promise<{ batches: number; events: number }> {
    const generation = replayGeneration();
    let started = performance.now();
    let rows = selectPending.all(0, batchSize);
    if (rows.length === 0) return total;
    beforeWrite?.();
    let pushing: Promise<number> = push(rows);
    for (;;) {
      const pushedAt = await pushing;
      const next = Date.now() < deadline ? selectPending.all(rows[rows.length - 1].id, batchSize) : [];
      const nextStarted = performance.now();
      if (next.length > 0) {
        beforeWrite?.();
        pushing = push(next);
        // Let ioredis write the next push to the socket before the synchronous UPDATE below.
        await new Promise((resolve) => setImmediate(resolve));
      }
      let marked: boolean;
      try {
        beforeWrite?.();
        marked = await markOrOwe({ rows, generation, started, pushedAt }, next.length > 0 ? { batch: { rows: next, generation, started: nextStarted }, pushing } : undefined);
      } finally {
        if (next.length > 0) pushing.catch(() => {});
      }
      // Rows were set back to PENDING meanwhile: the next pass pushes them (again) and marks them.
      if (!marked) return total;
      count(total, rows, started, onBatch);
      if (next.length === 0) return total;
      rows = next;
      started = nextStarted;
    }
  }

  return { relayAll, pair };
}

export type Relay = ReturnType<typeof createRelay>;
