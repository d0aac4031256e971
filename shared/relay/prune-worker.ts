import { Queue, Worker } from 'bullmq';
import type { Db } from '../db/open-database.js';
import type { Logger } from '../logger.js';
import { prune } from '../prune.js';
import { bullConnections } from '../redis/bull-connections.js';
import { keepJobScheduler } from './keep-job-scheduler.js';

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
 * up a relay pass. Global concurrency 1: one prune at a time across relay processes. The
 * scheduler is re-created when Redis loses it (`keepJobScheduler`).
 */
export async function startPruneWorker(db: Db, url: string, log: Logger, options: PruneScheduleOptions) {
  const bull = bullConnections(url);
  const queue = new Queue(PRUNE_QUEUE, { connection: bull.connection() });
  const worker = new Worker(
    PRUNE_QUEUE,
    async () => {
      const result = await prune(db, options.olderThanMs);
      if (result.deleted > 0) log.info('outbox pruned', { deleted: result.deleted, batches: result.batches, maxBatchMs: Number(result.maxBatchMs.toFixed(2)) });
      return result.deleted;
    },
    { connection: bull.connection(), concurrency: 1 },
  );
  worker.on('failed', (_job, error) => log.warn('prune job failed', { error: error.message }));
  const scheduler = await keepJobScheduler(
    queue,
    worker,
    { what: 'prune', id: PRUNE_SCHEDULER_ID, everyMs: options.everyMs, template: { name: 'prune', opts: { removeOnComplete: 10, removeOnFail: 10 } } },
    log,
  );
  return {
    async close(): Promise<void> {
      scheduler.stop();
      await worker.close();
      await queue.close();
      await bull.closeAll();
    },
  };
}
