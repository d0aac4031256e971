import type { Redis } from 'ioredis';
import { crashPoint, crashPointFires } from '../crash-point.js';
import type { Db } from '../store/open-database.js';
import { replayGenerationReader, storeIdOf } from '../store/store-meta.js';
import { OutboxError } from '../errors/outbox-error.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { ensurePaired, mismatch, type Pairing } from './store-pairing.js';
import { pushRows, type RowToPush } from './push-rows.js';
import { relayStatements } from './relay-statements.js';
import { createMarkPublished, markHalves, type MarkRequest } from './mark-published.js';
import { startMarkThread, type MarkThread } from './mark-thread.js';
import type { OutboxMetrics } from '../metrics/outbox-metrics.js';
import { sleep } from '../sleep.js';
import { sqliteBusyCode, withBusyTimeout } from '../store/sqlite-busy.js';

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
  rows: RowToPush[];
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
  const markInThisThread = createMarkPublished(db, markRows);
  options.metrics?.relayStarted();

  /** The crash point's line for a batch killed mid-mark. */
  const midBatchLine = (rows: RowToPush[]) => {
    const half = rows.length >> 1;
    return `crash point relay.mid-batch: dying with rows ${rows[0].id}-${rows[half - 1]?.id ?? rows[0].id} marked, uncommitted`;
  };

  /** What the mark of `batch` is told, in either thread. */
  const markRequest = ({ rows, pushedAt, generation }: UnmarkedBatch): MarkRequest => ({ ...markHalves(rows), pushedAt, generation });

  /** The connection's busy timeout (ms): how long a mark keeps trying for the write lock, in this thread or on the mark thread. */
  const busyTimeoutMs = db.pragma('busy_timeout', { simple: true }) as number;

  /**
   * Marks a batch in this thread (see createMarkPublished): false when a replay came in between.
   * SQLite's own wait for the write lock sleeps 1, 2, 5, 10, … up to 100 ms between tries, blocking
   * the event loop, while a service committing thousands of times a second takes the lock back in
   * between: marks waited tens of ms, and up to the whole busy timeout (SQLITE_BUSY four times in
   * 15 s at 2,000 orders/s, the machine loaded). So each try here does not wait (busy timeout 0
   * for that statement only: the connection's other users keep theirs), and a refused one is tried
   * again after 1 ms with the event loop free, until the busy timeout has passed: then its
   * SQLITE_BUSY is thrown as before. `beforeTry` (the job lock's check) runs before every try after
   * the first.
   */
  async function markHere(batch: UnmarkedBatch, beforeTry?: () => void): Promise<boolean> {
    const request = markRequest(batch);
    const midBatch = () => crashPoint('relay.mid-batch', () => midBatchLine(batch.rows));
    const giveUpAt = Date.now() + busyTimeoutMs;
    for (;;) {
      try {
        return withBusyTimeout(db, 0, () => markInThisThread(request, midBatch));
      } catch (error) {
        if (sqliteBusyCode(error) === undefined || Date.now() >= giveUpAt) throw error;
      }
      await sleep(1);
      beforeTry?.();
    }
  }

  let thread: MarkThread | undefined;
  /**
   * Marks a batch on the mark thread (started on first use, again after it ended), while this
   * thread reads and pushes the next: only for a file database and a full batch (a backlog).
   */
  function markThere(batch: UnmarkedBatch): Promise<boolean> {
    return markingThread().mark(markRequest(batch), crashPointFires('relay.mid-batch') ? midBatchLine(batch.rows) : undefined);
  }
  const canMarkThere = !db.memory && db.name !== '';
  function markingThread(): MarkThread {
    if (!thread?.alive) thread = startMarkThread({ path: db.name, busyTimeoutMs }, storeId);
    return thread;
  }

  /** Pushes `rows`; resolves Redis's clock when they reached the queue (their published_at). */
  async function push(rows: RowToPush[]): Promise<number> {
    const result = await pushRows(partitions, storeId, rows);
    if (result.status === 'unclaimed') throw new StateLostError();
    if (result.status === 'foreign') throw mismatch(db, result.redis, storeId, result.servedStore);
    crashPoint('relay.after-push', () => `crash point relay.after-push: pushed rows ${rows[0].id}-${rows[rows.length - 1].id}, dying before marking them PUBLISHED`);
    return result.pushedAt;
  }

  function summary(rows: RowToPush[], started: number): RelayBatch {
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
   * read and its push sent while batch N is marked (on the mark thread when batches are full, see
   * relayPass). Still, a row is marked only after its own push was acknowledged, batches are marked
   * in order, and pushes go out in id order. When a push finds
   * that Redis lost its state, the relay rebuilds it (see `ensurePaired`) and starts over from the
   * lowest PENDING id. When a mark fails (SQLITE_BUSY, SQLITE_FULL, …), the error is thrown and
   * the batches Redis acknowledged are remembered: the next call marks them before it pushes
   * anything, so waiting out a locked or full app.db re-pushes nothing.
   */
  async function relayAll({ onBatch, deadline = Infinity, beforeWrite }: RelayAllOptions = {}): Promise<{ batches: number; events: number }> {
    const total = { batches: 0, events: 0 };
    while (unmarked.length > 0) {
      beforeWrite?.();
      const { rows, started } = unmarked[0];
      const marked = await markHere(unmarked[0], beforeWrite);
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

  function count(total: { batches: number; events: number }, rows: RowToPush[], started: number, onBatch: RelayAllOptions['onBatch']): void {
    total.batches += 1;
    total.events += rows.length;
    const batch = summary(rows, started);
    options.metrics?.batchRelayed(batch.count, batch.durationMs / 1000);
    onBatch?.(batch);
  }

  /**
   * Relays one pass. Batches are read and pushed in id order, and marked in that order, each once
   * its own push was acknowledged. With a backlog (full batches) two pushes are in flight and the
   * mark runs on the mark thread, so reading and pushing the next batches, Redis running the
   * pushes and marking all go on at once; otherwise one batch at a time, marked here after the next
   * push was sent. When a mark fails, that batch and each following one Redis acknowledged (in
   * order) are remembered as unmarked.
   */
  async function relayPass(
    total: { batches: number; events: number },
    { onBatch, deadline = Infinity, beforeWrite }: RelayAllOptions,
  ): Promise<{ batches: number; events: number }> {
    const generation = replayGeneration();
    /** Pushed (or being pushed), not yet marked, in id order. */
    const inFlight: { rows: RowToPush[]; started: number; pushing: Promise<number> }[] = [];
    let after = 0;
    let lastCount = 0;
    /** Reads the next batch after `after` and sends its push; false when none is PENDING. */
    function readAndPush(): boolean {
      const started = performance.now();
      const rows = selectPending.all({ store: storeId, after, limit: batchSize });
      lastCount = rows.length;
      if (rows.length === 0) return false;
      after = rows[rows.length - 1].id;
      beforeWrite?.();
      const pushing = push(rows);
      pushing.catch(() => {});
      inFlight.push({ rows, started, pushing });
      return true;
    }
    /** Reads ahead: one batch in flight, two while the batches come full (a backlog); none past the deadline. */
    function fill(): void {
      while (lastCount > 0 && Date.now() < deadline && (inFlight.length === 0 || (inFlight.length < 2 && lastCount === batchSize))) readAndPush();
    }
    if (!readAndPush()) return total;
    fill();
    while (inFlight.length > 0) {
      const { rows, started, pushing } = inFlight.shift()!;
      const batch: UnmarkedBatch = { rows, generation, started, pushedAt: await pushing };
      let marking: Promise<boolean> | undefined;
      if (canMarkThere && rows.length === batchSize) {
        beforeWrite?.();
        marking = markThere(batch);
        marking.catch(() => {});
      }
      const sent = inFlight.length;
      fill();
      // Let ioredis write the next push to the socket before a synchronous mark below.
      if (!marking && inFlight.length > sent) await new Promise((resolve) => setImmediate(resolve));
      let marked: boolean;
      try {
        if (!marking) beforeWrite?.();
        marked = await (marking ?? markHere(batch, beforeWrite));
      } catch (error) {
        unmarked = [batch];
        for (const next of inFlight) {
          const pushedAt = await next.pushing.catch(() => undefined);
          if (pushedAt === undefined) break;
          unmarked.push({ rows: next.rows, generation, started: next.started, pushedAt });
        }
        throw error;
      }
      // Rows were set back to PENDING meanwhile: the next pass pushes them (again) and marks them.
      if (!marked) return total;
      count(total, rows, started, onBatch);
    }
    return total;
  }

  /** Ends the mark thread, if one runs (it also ends by itself after a while without work). */
  function close(): void {
    thread?.close();
  }

  /**
   * Starts the mark thread now rather than at the first backlog: the relay app, which meets one at
   * start (orders committed while it started), does not wait for the thread then. No-op for a
   * database in memory.
   */
  function prepare(): void {
    if (canMarkThere) markingThread();
  }

  return { relayAll, pair, close, prepare };
}

export type Relay = ReturnType<typeof createRelay>;
