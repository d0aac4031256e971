import type { Pool } from 'pg';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import type { Logger } from '../../outbox/logger.js';
import { prune, type PruneResult } from './prune.js';
import { explainError } from '../../outbox/errors/explain-error.js';
import { StoreMismatchError } from '../../outbox/errors/store-mismatch-error.js';
import { incidentLog } from '../../outbox/incident-log.js';
import { startScheduledWorker } from '../../outbox/relay/scheduled-worker.js';
import { assertSameStore } from '../../outbox/relay/store-pairing.js';
import type { Partitions } from '../../outbox/redis/partitions.js';

export const PRUNE_QUEUE = 'outbox-prune';
export const PRUNE_SCHEDULER_ID = 'prune';

export interface PruneScheduleOptions {
  /** Rows older than this (ms) are pruned. */
  olderThanMs: number;
  /** How often a prune job runs (ms). */
  everyMs: number;
}

/**
 * The relay app's prune schedule (on by default: relay-config.ts), on a queue of its own so that a
 * long prune never holds up a relay pass. Global concurrency 1: one prune at a time across relay
 * processes; the queue lives in partition 0, as the relay's. `partitions` are the app's connections,
 * on which prune asks which events the consumer applied (each in its aggregate's partition). It
 * prunes the file that is app.db when a job starts, none while there is no live one; given a pool,
 * the PostgreSQL store. The scheduler is re-created when Redis loses it (`keepJobScheduler`).
 * `cluster`: BullMQ's connections reach one Redis, not a Cluster, so there a timer runs it instead
 * (on PostgreSQL only; each relay then prunes: concurrent prunes delete each row once, see pg-prune.ts).
 */
export async function startPruneWorker(
  database: DatabaseWatch | Pool,
  partitions: Partitions,
  url: string,
  log: Logger,
  options: PruneScheduleOptions & { cluster?: boolean },
) {
  const redis = partitions.clients[0];
  // A failure that repeats at every run (the store behind Redis) is logged once, until a run works.
  const failures = incidentLog(log);
  const failed = (error: Error) => failures.warn('prune job failed', { error: explainError(error)?.message ?? error.message });
  if (options.cluster) return startPruneTimer(pruneOnce, options.everyMs, failed);
  return startScheduledWorker(redis, url, log, {
    queue: PRUNE_QUEUE,
    what: 'prune',
    schedulerId: PRUNE_SCHEDULER_ID,
    everyMs: options.everyMs,
    keepJobs: 10,
    workerOptions: { concurrency: 1 },
    listen: (worker) => worker.on('failed', (_job, error) => failed(error)),
    processor: pruneOnce,
  });

  async function pruneOnce(): Promise<number> {
    const result = 'query' in database ? await pruneOnPg(database) : await pruneLive(database);
    if (result === undefined) return 0;
    failures.clear();
    if (result.deleted > 0 || result.keptNotApplied > 0 || result.stoppedEarly) {
      log.info('outbox pruned', {
        deleted: result.deleted,
        keptNotApplied: result.keptNotApplied,
        // Stopped before rows it read (replayed meanwhile, or an earlier row of their aggregate still
        // there): the next run goes on.
        ...(result.stoppedEarly ? { stoppedEarly: true } : {}),
        batches: result.batches,
        maxBatchMs: Number(result.maxBatchMs.toFixed(2)),
      });
    }
    return result.deleted;
  }

  async function pruneLive(database: DatabaseWatch): Promise<PruneResult | undefined> {
    if (!database.check()) return undefined;
    const live = database.current();
    const release = live.hold();
    try {
      // Another store's Redis knows nothing of these events: nothing is pruned. The relay refuses
      // that pair too, and says so in one line: no second one here.
      if (!(await pairedWith(assertSameStore(live.db, partitions)))) return undefined;
      return await prune(live.db, partitions, options.olderThanMs);
    } finally {
      release();
    }
  }

  async function pruneOnPg(pool: Pool): Promise<PruneResult | undefined> {
    const { assertPgSameStore } = await import('../../outbox/postgres/pg-pairing.js');
    const { pgPruneRows } = await import('./pg-prune.js');
    if (!(await pairedWith(assertPgSameStore(pool, partitions)))) return undefined;
    return prune(pgPruneRows(pool), partitions, options.olderThanMs);
  }
}

/** Whether the store check passed; false when Redis serves another store (`StoreMismatchError`). */
async function pairedWith(check: Promise<unknown>): Promise<boolean> {
  try {
    await check;
    return true;
  } catch (error) {
    if (error instanceof StoreMismatchError) return false;
    throw error;
  }
}

/** `run` every `everyMs`, one run at a time in this process, a failure given to `failed` as the worker's are. */
function startPruneTimer(run: () => Promise<number>, everyMs: number, failed: (error: Error) => void) {
  let running: Promise<unknown> | undefined;
  const timer = setInterval(() => {
    running ??= run()
      .catch(failed)
      .finally(() => (running = undefined));
  }, everyMs);
  timer.unref();
  return {
    async close(): Promise<void> {
      clearInterval(timer);
      await running;
    },
  };
}
