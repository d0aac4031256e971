import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { DatabaseWatch, LiveDatabase } from '../db/live-database.js';
import type { Logger } from '../logger.js';
import { bullConnections } from '../redis/bull-connections.js';
import { bullPrefixOf, keys } from '../redis/keys.js';
import { keyPrefixOfConnection } from '../redis/scan-keys.js';
import { sleep } from '../sleep.js';
import { keepJobScheduler } from './keep-job-scheduler.js';
import { createRelay, DEFAULT_RELAY_BATCH_SIZE, type Relay } from './relay.js';
import { describePairing } from './store-pairing.js';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';

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
  /** How often workers look for stalled jobs (ms). Default 2000. */
  stalledIntervalMs?: number;
}

export interface RelayJobResult {
  events: number;
  batches: number;
}

function withDefaults(options: RelayWorkerOptions): Required<RelayWorkerOptions> {
  return {
    everyMs: options.everyMs ?? 1000,
    sliceMs: options.sliceMs ?? 1500,
    pollMs: options.pollMs ?? 5,
    batchSize: options.batchSize ?? DEFAULT_RELAY_BATCH_SIZE,
    lockDurationMs: options.lockDurationMs ?? 4000,
    stalledIntervalMs: options.stalledIntervalMs ?? 2000,
  };
}

/**
 * The relay app: a BullMQ Worker on `outbox-relay`, fed by a job scheduler. Global concurrency 1
 * means exactly one relay pass runs at a time however many relay processes there are. The
 * scheduler is re-created when Redis loses it (`keepJobScheduler`).
 * `redis` carries the pushes; BullMQ gets its own connections to `url`. Each pass relays from the
 * file that is app.db at its start: none while there is no live one (deleted or replaced).
 */
export async function startRelayWorker(database: DatabaseWatch, redis: Redis, url: string, log: Logger, options: RelayWorkerOptions = {}) {
  const config = withDefaults(options);
  let current: { live: LiveDatabase; relay: Relay } | undefined;
  const relayOn = (live: LiveDatabase): Relay => {
    if (current?.live !== live) {
      const relay = createRelay(live.db, redis, {
        batchSize: config.batchSize,
        onPairing: (pairing) =>
          pairing.kind === 'rebuilt'
            ? log.warn(describePairing(pairing), { republished: pairing.republished, unrecoverable: pairing.unrecoverable })
            : log.info(describePairing(pairing)),
        // A relay whose app.db was deleted or replaced must not claim a Redis for the old store.
        assertLive: () => {
          if (!live.isLive()) throw new StoreUnavailableError(`${live.path} was deleted or replaced: not claiming Redis for it`);
        },
      });
      current = { live, relay };
    }
    return current.relay;
  };
  const closing = new AbortController();
  const bull = bullConnections(url);
  // In a namespace the queue's keys live under it too.
  const prefix = bullPrefixOf(keyPrefixOfConnection(redis));

  const queue = new Queue(RELAY_QUEUE, { connection: bull.connection(), prefix });

  /** Why the relay refuses to push (app.db and Redis belong to different stores), while it does. */
  let refused: string | undefined;

  async function process(job: Job): Promise<RelayJobResult> {
    const started = Date.now();
    const deadline = started + config.sliceMs;
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
        if (!(error instanceof StoreMismatchError)) throw error;
        // Said once, not every second; relaying resumes by itself once the pair matches again.
        if (refused !== error.message) log.error(error.message);
        refused = error.message;
        await sleep(Math.max(0, deadline - Date.now()), closing.signal);
        return { events, batches };
      } finally {
        release();
      }
    }
    while (Date.now() < deadline && !closing.signal.aborted) {
      if (!database.check()) break;
      const live = database.current();
      const release = live.hold();
      let pass: { events: number; batches: number };
      try {
        pass = await relayOn(live).relayAll((batch) => {
          log.info('batch relayed', { count: batch.count, firstId: batch.firstId, lastId: batch.lastId, durationMs: Number(batch.durationMs.toFixed(2)) });
        }, deadline);
      } finally {
        release();
      }
      events += pass.events;
      batches += pass.batches;
      if (pass.events === 0) await sleep(config.pollMs, closing.signal);
    }
    const durationMs = Date.now() - started;
    await redis.hset(keys.relayLastRun, { at: Date.now(), jobId: job.id ?? '', events, batches, durationMs });
    return { events, batches };
  }

  const worker = new Worker(RELAY_QUEUE, process, {
    connection: bull.connection(),
    prefix,
    concurrency: 1,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    // A stalled relay job means a relay process died; that is not the job's fault.
    maxStalledCount: 1000,
  });
  worker.on('failed', (job, error) => log.warn('relay job failed', { jobId: job?.id, error: error.message }));
  worker.on('stalled', (jobId) => log.warn('relay job stalled (its relay died): taken over', { jobId }));
  worker.on('error', (error) => log.warn('relay worker error', { error: error.message }));
  const scheduler = await keepJobScheduler(
    queue,
    worker,
    { what: 'relay', id: RELAY_SCHEDULER_ID, everyMs: config.everyMs, template: { name: 'relay', opts: { removeOnComplete: 100, removeOnFail: 100 } } },
    log,
  );

  return {
    /** Finishes the current batch, stops taking jobs, closes the BullMQ connections. */
    async close(): Promise<void> {
      closing.abort();
      scheduler.stop();
      await worker.close();
      await queue.close();
      await bull.closeAll();
    },
  };
}
