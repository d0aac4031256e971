import { Queue, Worker } from 'bullmq';
import type { DatabaseWatch } from '../db/live-database.js';
import type { Logger } from '../logger.js';
import { prune } from '../prune.js';
import { bullConnections } from '../redis/bull-connections.js';

export const PRUNE_QUEUE = 'outbox-prune';

export interface PruneScheduleOptions {
  /** Rows older than this (ms) are pruned. */
  olderThanMs: number;
  /** How often a prune job runs (ms). */
  everyMs: number;
}

/**
 * The relay app's optional prune schedule, on a queue of its own so that a long prune never holds
 * up a relay pass. Global concurrency 1: one prune at a time across relay processes. It prunes the
 * file that is app.db when a job starts, none while there is no live one.
 */
export async function startPruneWorker(database: DatabaseWatch, url: string, log: Logger, options: PruneScheduleOptions) {
  const bull = bullConnections(url);
  const queue = new Queue(PRUNE_QUEUE, { connection: bull.connection() });
  await queue.setGlobalConcurrency(1);
  await queue.upsertJobScheduler('prune', { every: options.everyMs }, { name: 'prune', opts: { removeOnComplete: 10, removeOnFail: 10 } });
  const worker = new Worker(
    PRUNE_QUEUE,
    async () => {
      if (!database.check()) return 0;
      const live = database.current();
      const release = live.hold();
      let result: Awaited<ReturnType<typeof prune>>;
      try {
        result = await prune(live.db, options.olderThanMs);
      } finally {
        release();
      }
      if (result.deleted > 0) log.info('outbox pruned', { deleted: result.deleted, batches: result.batches, maxBatchMs: Number(result.maxBatchMs.toFixed(2)) });
      return result.deleted;
    },
    { connection: bull.connection(), concurrency: 1 },
  );
  worker.on('failed', (_job, error) => log.warn('prune job failed', { error: error.message }));
  return {
    async close(): Promise<void> {
      await worker.close();
      await queue.close();
      await bull.closeAll();
    },
  };
}
