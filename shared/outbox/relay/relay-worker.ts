import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { DatabaseWatch, LiveDatabase } from '../store/live-database.js';
import type { Logger } from '../logger.js';
import { explainError } from '../errors/explain-error.js';
import { incidentLog } from '../incident-log.js';
import { keys } from '../redis/keys.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { sleep } from '../sleep.js';
import { startScheduledWorker } from './scheduled-worker.js';
import { holdJobLock, LockLostError, type JobLock } from './job-lock.js';
import { createRelay, DEFAULT_RELAY_BATCH_SIZE, type Relay, type RelayOptions } from './relay.js';
import { writeBlockedCause } from './write-blocked.js';
import { OutboxError } from '../errors/outbox-error.js';
import { describePairing } from './store-pairing.js';
import { StoreRefusedError } from '../errors/store-refused-error.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import { createRelayStats, startRelayStatsLine, type PassOutcome } from './relay-stats.js';

export const RELAY_QUEUE = 'outbox-relay';
export const RELAY_SCHEDULER_ID = 'relay-pass';

export interface RelayWorkerOptions {
  /** The scheduler makes a relay job this often (ms). Default 1000. */
  everyMs?: number;
  /**
   * How long one job keeps relaying (ms). Default 1500: longer than `everyMs`, so the next job is
   * already waiting when one ends and relaying is continuous; latency is bound by `pollMs`, not by
   * the scheduler.
   */
  sliceMs?: number;
  /** Pause when no row is PENDING, within a slice (ms). Default 5. */
  pollMs?: number;
  /** Rows per batch. Default 1000. */
  batchSize?: number;
  /** BullMQ lock of a running job (ms); a SIGKILLed relay's job is taken over after about this plus `stalledIntervalMs`. Default 4000. */
  lockDurationMs?: number;
  /**
   * SQLite busy timeout of the relay's app.db connection (ms). better-sqlite3 waits synchronously,
   * so nothing (not even the lock renewal) runs meanwhile: it must stay well below the lock.
   * Default `lockDurationMs / 4`; at most `lockDurationMs / 2`.
   */
  busyTimeoutMs?: number;
  /** How often workers look for stalled jobs (ms). Default 2000. */
  stalledIntervalMs?: number;
  /** Interval of the `relay stats` line (ms; 0 = never). Default 10000. */
  statsEveryMs?: number;
  /** Counts batches and Redis state losses (`createOutboxMetrics`). Default none. */
  metrics?: RelayOptions['metrics'];
}

export interface RelayJobResult {
  events: number;
  batches: number;
  /** How the pass ended (see `PassOutcome`), and why when not `ok`. */
  outcome: PassOutcome;
  reason?: string;
}

/** The first pause after app.db refused a write, and the longest one (ms); it doubles in between. */
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 2000;

function withDefaults(options: RelayWorkerOptions): Required<Omit<RelayWorkerOptions, 'metrics'>> {
  const lockDurationMs = options.lockDurationMs ?? 4000;
  const config = {
    everyMs: options.everyMs ?? 1000,
    sliceMs: options.sliceMs ?? 1500,
    pollMs: options.pollMs ?? 5,
    batchSize: options.batchSize ?? DEFAULT_RELAY_BATCH_SIZE,
    lockDurationMs,
    busyTimeoutMs: options.busyTimeoutMs ?? Math.floor(lockDurationMs / 4),
    stalledIntervalMs: options.stalledIntervalMs ?? 2000,
    statsEveryMs: options.statsEveryMs ?? 10_000,
  };
  if (!(Number.isInteger(lockDurationMs) && lockDurationMs >= 100)) {
    throw new OutboxError(`relay lock duration must be an integer of at least 100 ms, got ${lockDurationMs}: pass e.g. --lock-duration 4s`, 2);
  }
  if (!(Number.isInteger(config.busyTimeoutMs) && config.busyTimeoutMs >= 0 && config.busyTimeoutMs <= lockDurationMs / 2)) {
    throw new OutboxError(`relay busy timeout must be an integer from 0 to half the lock duration (${lockDurationMs / 2} ms), got ${config.busyTimeoutMs}: leave it unset`, 2);
  }
  return config;
}

/**
 * The relay app: a BullMQ Worker on `outbox-relay`, fed by a job scheduler. Global concurrency 1
 * means one relay job runs at a time however many relay processes there are, as long as the
 * running job holds its lock: it extends the lock while it works, checks it before every push and
 * every mark, and never waits for SQLite's write lock longer than a quarter of it. When app.db
 * refuses a write (locked by another writer, disk full) the job keeps its lock and backs off until
 * the mark of what it pushed succeeds, so no other relay re-pushes those rows meanwhile. The
 * scheduler is re-created when Redis loses it (`keepJobScheduler`).
 * `queues` carries the pushes (a connection, or the partitions); BullMQ gets its own connections
 * to `url` (its job lives beside partition 0's keys). Each pass relays from the
 * file that is app.db at its start: none while there is no live one (deleted or replaced).
 */
export async function startRelayWorker(database: DatabaseWatch, queues: Redis | Partitions, url: string, log: Logger, options: RelayWorkerOptions = {}) {
  const config = withDefaults(options);
  const redis = partitionsOf(queues).clients[0];
  let current: { live: LiveDatabase; relay: Relay } | undefined;
  const relayOn = (live: LiveDatabase): Relay => {
    if (current?.live !== live) {
      // The last file's mark thread, if any, ends with its connection.
      current?.relay.close();
      // The process's connection (prune shares it): its waits block the event loop, lock renewal included.
      live.db.pragma(`busy_timeout = ${config.busyTimeoutMs}`);
      const relay = createRelay(live.db, queues, {
        batchSize: config.batchSize,
        metrics: options.metrics,
        onPairing: (pairing) =>
          pairing.kind === 'rebuilt'
            ? log.warn(describePairing(pairing), { republished: pairing.republished, unrecoverable: pairing.unrecoverable })
            : log.info(describePairing(pairing)),
        // A relay whose app.db was deleted or replaced must not claim a Redis for the old store.
        assertLive: () => {
          if (!live.isLive()) throw new StoreUnavailableError(`${live.path} was deleted or replaced: not claiming Redis for it`);
        },
      });
      // Orders committed while the app started make a backlog at once: the mark thread is ready for it.
      relay.prepare();
      current = { live, relay };
    }
    return current.relay;
  };
  const closing = new AbortController();
  const stats = createRelayStats();

  /** Why the relay refuses to push (app.db and Redis belong to different stores), while it does. */
  let refused: string | undefined;

  /** Why app.db refuses the relay's writes (logged once), while it does; the next pause. */
  let blocked: string | undefined;
  let backoffMs = BACKOFF_FIRST_MS;

  /** Logs the cause once per incident and pauses, longer each time (capped). */
  async function backOff(cause: string, signal: AbortSignal): Promise<void> {
    if (blocked !== cause) log.warn(cause);
    blocked = cause;
    stats.blockedBy(cause);
    await sleep(backoffMs, signal);
    backoffMs = Math.min(backoffMs * 2, BACKOFF_MAX_MS);
  }

  function resumed(): void {
    if (blocked === undefined) return;
    log.info('app.db accepts the relay\'s writes again: relaying resumes');
    blocked = undefined;
    stats.unblocked();
    backoffMs = BACKOFF_FIRST_MS;
  }

  async function process(job: Job, token?: string): Promise<RelayJobResult> {
    const lock = await holdJobLock(job, token!, { durationMs: config.lockDurationMs, marginMs: config.busyTimeoutMs });
    stats.passStarted();
    let result: RelayJobResult;
    try {
      result = await relaySlice(job, lock);
    } catch (error) {
      if (!(error instanceof LockLostError)) {
        stats.passEnded('failed', { events: 0, batches: 0 }, explainError(error)?.message ?? (error as Error).message);
        throw error;
      }
      log.warn(error.message, { jobId: job.id });
      result = { events: 0, batches: 0, outcome: 'lock-lost', reason: error.message };
    } finally {
      lock.release();
    }
    stats.passEnded(result.outcome, result, result.reason);
    return result;
  }

  /**
   * Relays for one slice. While app.db refuses writes the job keeps its lock past the slice and
   * backs off until the mark succeeds: ending the job would let the next one (maybe another
   * relay's) push the same PENDING rows again, and again, for as long as the disk stays full.
   */
  async function relaySlice(job: Job, lock: JobLock): Promise<RelayJobResult> {
    const started = Date.now();
    const deadline = started + config.sliceMs;
    const stop = AbortSignal.any([closing.signal, lock.lost]);
    let events = 0;
    let batches = 0;
    // Once a job, even when nothing is PENDING: notices a Redis that lost its state within a slice.
    if (database.check()) {
      const live = database.current();
      const release = live.hold();
      try {
        await relayOn(live).pair();
        refused = undefined;
      } catch (error) {
        // Pairing writes app.db when it claims or rebuilds a Redis.
        const cause = writeBlockedCause(error);
        if (cause !== undefined) {
          await backOff(cause, stop);
          return { events, batches, outcome: 'write-blocked', reason: cause };
        }
        if (!(error instanceof StoreRefusedError)) throw error;
        // Said once, not every second; relaying resumes by itself once the pair matches again.
        if (refused !== error.message) log.error(error.message);
        refused = error.message;
        await sleep(Math.max(0, deadline - Date.now()), stop);
        return { events, batches, outcome: 'store-mismatch', reason: error.message };
      } finally {
        release();
      }
    }
    while ((Date.now() < deadline || blocked !== undefined) && !stop.aborted) {
      if (!database.check()) break;
      const live = database.current();
      const release = live.hold();
      let pass = { events: 0, batches: 0 };
      let cause: string | undefined;
      try {
        pass = await relayOn(live).relayAll({
          onBatch: (batch) => {
            void lock.extend();
            stats.batchRelayed(batch.count);
            log.debug('batch relayed', { count: batch.count, firstId: batch.firstId, lastId: batch.lastId, durationMs: Number(batch.durationMs.toFixed(2)) });
          },
          deadline,
          beforeWrite: lock.assertHeld,
        });
      } catch (error) {
        cause = writeBlockedCause(error);
        if (cause === undefined) throw error;
      } finally {
        release();
      }
      if (cause !== undefined) {
        await backOff(cause, stop);
        continue;
      }
      resumed();
      events += pass.events;
      batches += pass.batches;
      if (pass.events === 0) await sleep(config.pollMs, stop);
    }
    // Lost, or no longer surely held (no extension Redis confirmed within the margin: the process was
    // frozen or Redis unreachable meanwhile): say so (process() logs it) rather than end as if the
    // slice was done, and write nothing more. The pass's marks are all done by now; nothing is undone.
    lock.assertHeld();
    const durationMs = Date.now() - started;
    await redis.hset(keys.relayLastRun, { at: Date.now(), jobId: job.id ?? '', events, batches, durationMs });
    if (!database.check()) return { events, batches, outcome: 'no-database', reason: database.reason() };
    return { events, batches, outcome: closing.signal.aborted ? 'stopped' : 'ok' };
  }

  const failures = incidentLog(log);
  const scheduled = await startScheduledWorker(redis, url, log, {
    queue: RELAY_QUEUE,
    what: 'relay',
    schedulerId: RELAY_SCHEDULER_ID,
    everyMs: config.everyMs,
    keepJobs: 100,
    processor: process,
    workerOptions: {
      concurrency: 1,
      lockDuration: config.lockDurationMs,
      stalledInterval: config.stalledIntervalMs,
      // A stalled relay job means a relay process died or was blocked; that is not the job's fault.
      maxStalledCount: 1000,
    },
    listen: (worker) => {
      worker.on('failed', (job, error) => failures.warn('relay job failed', { jobId: job?.id, error: explainError(error)?.message ?? error.message }));
      worker.on('completed', () => failures.clear());
      worker.on('stalled', (jobId) => log.warn('relay job stalled: its lock expired (relay process died or blocked); another relay takes over', { jobId }));
    },
  });

  // One line per interval at info: what was relayed in it, and the age of the oldest PENDING row now.
  const stopStats = startRelayStatsLine(stats, config.statsEveryMs, () => oldestPendingAgeMs(database), log);

  return {
    /** This relay's numbers: counters, its last pass, a pass running now (see `createRelayStats`). */
    stats,
    /** Finishes the current batch, stops taking jobs, closes the BullMQ connections. */
    async close(): Promise<void> {
      stopStats();
      closing.abort();
      await scheduled.close();
      current?.relay.close();
    },
  };
}

/** Age of the oldest PENDING row of the live app.db (ms): the relay's lag; 0 when none, null without a live app.db. */
export function oldestPendingAgeMs(database: DatabaseWatch, now = Date.now()): number | null {
  if (!database.check()) return null;
  const live = database.current();
  const release = live.hold();
  try {
    // The partial index holds (status, rowid): the lowest PENDING id, read in index order.
    const oldest = live.db.prepare("SELECT created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1").pluck().get() as number | undefined;
    return oldest === undefined ? 0 : Math.max(0, now - oldest);
  } finally {
    release();
  }
}
