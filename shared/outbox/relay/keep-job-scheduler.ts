import type { JobSchedulerTemplateOptions, Queue, Worker } from 'bullmq';
import type { Logger } from '../logger.js';

export interface JobSchedulerSpec {
  /** Names the scheduler in the log: `<what> job scheduler was missing …`. */
  what: string;
  id: string;
  everyMs: number;
  template: { name: string; opts: JobSchedulerTemplateOptions };
}

/** How often the scheduler's existence is checked (ms). */
export const SCHEDULER_CHECK_MS = 2000;

/** BullMQ's errors for a job whose keys vanished under it: Redis lost its data. */
const LOST_KEYS = /Missing (key|lock)/;

/**
 * Creates `queue`'s job scheduler and its global concurrency 1, and keeps them alive: a job
 * scheduler lives only in Redis, so after Redis lost its data (FLUSHALL, a restart without
 * persistence) no job would ever be made again while the worker looks healthy. Checked every
 * `SCHEDULER_CHECK_MS`, and at once when `worker` reports a job whose keys are missing.
 */
export async function keepJobScheduler(queue: Queue, worker: Worker, spec: JobSchedulerSpec, log: Logger) {
  const create = async () => {
    await queue.setGlobalConcurrency(1);
    await queue.upsertJobScheduler(spec.id, { every: spec.everyMs }, spec.template);
  };
  await create();

  let stopped = false;
  let checking: Promise<void> | undefined;
  const check = () => {
    checking ??= (async () => {
      const [scheduler, concurrency] = await Promise.all([queue.getJobScheduler(spec.id), queue.getGlobalConcurrency()]);
      if (stopped || (scheduler && concurrency === 1)) return;
      await create();
      log.warn(`${spec.what} job scheduler was missing (Redis lost its data?): re-created`, { scheduler: spec.id });
    })()
      .catch((error: Error) => {
        if (!stopped) log.warn(`cannot check the ${spec.what} job scheduler`, { error });
      })
      .finally(() => (checking = undefined));
  };
  const timer = setInterval(check, SCHEDULER_CHECK_MS);
  const onError = (error: Error) => {
    if (LOST_KEYS.test(error.message)) check();
  };
  worker.on('error', onError);
  worker.on('failed', (_job, error) => onError(error));

  return {
    /** Stops checking (before the queue is closed). */
    stop(): void {
      stopped = true;
      clearInterval(timer);
    },
  };
}
