import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import type { Logger } from '../../outbox/logger.js';
import { prune, type PruneResult } from './prune.js';
import { explainError } from '../../outbox/errors/explain-error.js';
import { startScheduledWorker } from '../../outbox/relay/scheduled-worker.js';
import { assertSameStore } from '../../outbox/relay/store-pairing.js';

export const PRUNE_QUEUE = 'outbox-prune';
export const PRUNE_SCHEDULER_ID = 'prune';

export interface PruneScheduleOptions {
  /** Rows older than this (ms) are pruned. */
  olderThanMs: number;
  /** How often a prune job runs (ms). */
  everyMs: number;
}

/**
 * The relay app's optional prune schedule, on a queue of its own so that a long prune never holds
 * up a relay pass. Global concurrency 1: one prune at a time across relay processes. `redis` is the
 * app's connection, on which prune asks which events the consumer applied. It prunes the file that
 * is app.db when a job starts, none while there is no live one; given a pool, the PostgreSQL store.
 * The scheduler is re-created when Redis loses it (`keepJobScheduler`).
 */
export async function startPruneWorker(database: DatabaseWatch | Pool, redis: Redis, url: string, log: Logger, options: PruneScheduleOptions) {
  return startScheduledWorker(redis, url, log, {
    queue: PRUNE_QUEUE,
    what: 'prune',
    schedulerId: PRUNE_SCHEDULER_ID,
    everyMs: options.everyMs,
    keepJobs: 10,
    workerOptions: { concurrency: 1 },
    listen: (worker) => worker.on('failed', (_job, error) => log.warn('prune job failed', { error: explainError(error)?.message ?? error.message })),
    processor: async () => {
      const result = 'query' in database ? await pruneOnPg(database) : await pruneLive(database);
      if (result === undefined) return 0;
      if (result.deleted > 0 || result.keptNotApplied > 0 || result.stoppedEarly) {
        log.info('outbox pruned', {
          deleted: result.deleted,
          keptNotApplied: result.keptNotApplied,
          // Stopped before rows it read (replayed meanwhile, or an earlier row of their aggregate still there): the next run goes on.
          ...(result.stoppedEarly ? { stoppedEarly: true } : {}),
          batches: result.batches,
          maxBatchMs: Number(result.maxBatchMs.toFixed(2)),
        });
      }
      return result.deleted;
    },
  });

  async function pruneLive(database: DatabaseWatch): Promise<PruneResult | undefined> {
    if (!database.check()) return undefined;
    const live = database.current();
    const release = live.hold();
    try {
      // Another store's Redis knows nothing of these events: refuse rather than read it.
      await assertSameStore(live.db, redis);
      return await prune(live.db, redis, options.olderThanMs);
    } finally {
      release();
    }
  }

  async function pruneOnPg(pool: Pool): Promise<PruneResult> {
    const { assertPgSameStore } = await import('../../outbox/postgres/pg-pairing.js');
    const { pgPruneRows } = await import('./pg-prune.js');
    await assertPgSameStore(pool, redis);
    return prune(pgPruneRows(pool), redis, options.olderThanMs);
  }
}
