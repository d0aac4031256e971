import { createRequire } from 'node:module';
import type { Processor, Worker as BullWorker, WorkerOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import { bullConnections, logBullErrors } from '../redis/bull-connections.js';
import { bullPrefixOf } from '../redis/keys.js';
import { keyPrefixOfConnection } from '../redis/scan-keys.js';
import { keepJobScheduler } from './keep-job-scheduler.js';

// BullMQ's CommonJS build, through require: node's ESM loader would compile its ESM tree file by
// file, about 55 ms more of the relay app's start (measured: 124-138 against 171-195 ms).
const { Queue, Worker } = createRequire(import.meta.url)('bullmq') as typeof import('bullmq');

export interface ScheduledWorkerSpec {
  queue: string;
  /** Names the queue in logs (`<what> queue error`, `<what> job scheduler was missing …`) and its jobs. */
  what: string;
  schedulerId: string;
  everyMs: number;
  /** Finished and failed jobs BullMQ keeps. */
  keepJobs: number;
  processor: Processor;
  workerOptions?: Omit<WorkerOptions, 'connection' | 'prefix'>;
  /** Attaches the caller's listeners, before the worker can finish a job. */
  listen?: (worker: BullWorker) => void;
}

/**
 * A BullMQ worker fed by a job scheduler that is kept alive (`keepJobScheduler`), as the relay app
 * runs its relay and prune queues: its own connections to `url`, the queue's keys under the
 * namespace of `redis`, every error logged as one line. `close` stops it all.
 */
export async function startScheduledWorker(redis: Redis, url: string, log: Logger, spec: ScheduledWorkerSpec) {
  const bull = bullConnections(url);
  // In a namespace the queue's keys live under it too.
  const prefix = bullPrefixOf(keyPrefixOfConnection(redis));
  const queue = new Queue(spec.queue, { connection: bull.connection(), prefix });
  const worker = new Worker(spec.queue, spec.processor, { ...spec.workerOptions, connection: bull.connection(), prefix });
  spec.listen?.(worker);
  logBullErrors([queue, worker], spec.what, log);
  const scheduler = await keepJobScheduler(
    queue,
    worker,
    { what: spec.what, id: spec.schedulerId, everyMs: spec.everyMs, template: { name: spec.what, opts: { removeOnComplete: spec.keepJobs, removeOnFail: spec.keepJobs } } },
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
