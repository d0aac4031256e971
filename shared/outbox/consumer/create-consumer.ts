import type { Redis } from 'ioredis';
import type { Piscina } from 'piscina';
import { ConfigError } from '../errors/config-error.js';
import type { Logger } from '../logger.js';
import type { OutboxEvent } from '../store/events.js';
import { DEFAULT_DEDUPE_WINDOW_MS } from '../redis/dedupe-window.js';
import { identityOf, same } from '../store/file-identity.js';
import { createConsumerEngine, DEFAULT_MAX_ATTEMPTS, emptyStats, type ConsumeStats, type ConsumerOptions } from './consumer.js';
import type { HandlerFault } from './handler-fault.js';
import { decodeResults, encodeEvents, type HandlerTask } from './handler-worker.js';
import type { Database } from 'better-sqlite3';
import { deliver, type DatabaseHandlerSet, type HandlerSet, type RedisHandlerSet } from './handlers.js';
import { notAHandlerSet } from './load-handlers.js';
import { runRedisHandlers } from './run-redis-handlers.js';
import { startConsumer, type RunConsumerOptions } from './run-consumer.js';
import { keys } from '../redis/keys.js';
import { sumCounters } from '../stats-interval.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { checkPartitionLayout } from '../redis/partition-layout.js';
import { partitionTagOfConnection } from '../redis/scan-keys.js';
import { DEFAULT_PARTITION_LEASE_MS } from './partition-leases.js';
import { startPartitionedConsumer } from './partitioned-consumer.js';

export interface CreateConsumerOptions {
  /**
   * A connection to the Redis the relay pushes to (its key prefix is the namespace), or the
   * partitions (`connectPartitions`): then `start()` consumes its share of them by lease, and
   * `drain()` drains them all.
   */
  redis: Redis | Partitions;
  /**
   * The handler set (`defineRedisHandlers`), run in this thread; or the URL of a module whose
   * export `handlers` is one, run on a pool of `threads` worker threads (piscina), each of which
   * has loaded it when `createConsumer` resolves.
   */
  handlers: HandlerSet | URL;
  /** Names this consumer's processing list; a consumer started again with the same id recovers it. 1-64 of [A-Za-z0-9._-]. Default 'consumer'. */
  consumerId?: string;
  /** Messages taken per round, at most. 1-100000, default 1000. */
  batchSize?: number;
  /** Worker threads, for a module URL. 1-64, default 2. */
  threads?: number;
  /** Lanes a round is split into by aggregate (parallel across lanes, in order within one). 1-64, default `threads` for a module URL, 1 in this thread. */
  lanes?: number;
  /** Handler attempts at an event before it is dead-lettered. 1-1000, default 5. */
  maxAttempts?: number;
  /**
   * How long an applied event's records (marker, processed entry, apply count) are kept, ms; beyond
   * it the aggregate's seq guard tells a duplicate. 1000-2^31 s, default 7 days.
   */
  dedupeWindowMs?: number;
  /**
   * Drops the seq guard of an aggregate idle for longer than this, ms: at least the window, and
   * longer than any event takes from commit to apply. Redis mode only. Default none (kept for good).
   */
  aggregateHorizonMs?: number;
  /** How long one task on a worker thread may run (from when the thread starts it, not from when it was queued) before the thread is stopped and the attempt fails, ms. Default 5000. */
  handlerTimeoutMs?: number;
  /** Simulated CPU work per event, ms, for benchmarks. Default 0. */
  cpuCostMs?: number;
  /** Injected handler failures (tests, chaos), for a module URL: the fault in force when a task is sent. Default none. */
  fault?: () => HandlerFault | undefined;
  /** Told of bad state the apply script met in Redis (a key of another type, a non-integer where hincrby adds, ...). */
  onProblem?: (problem: string) => void;
  /**
   * Database mode (a `defineDatabaseHandlers` set; required there, refused otherwise): the
   * consumer's own SQLite file (opened with WAL) or a better-sqlite3 connection to it. Each handler
   * writes there inside the transaction that records its event in the inbox table. It is never
   * created here: a missing file, or a database without the inbox table, is refused
   * (StoreUnavailableError); `createConsumerDatabase` makes it the first time, and `outbox verify
   * --repair --consumer-db <file>` rebuilds a lost one from the store.
   */
  database?: string | Database;
  /**
   * Database mode: how long a claim holds an event, ms. A consumer that dies between claim and
   * complete leaves its events claimed this long; then another attempt takes them. Longer than
   * the slowest handler. 1-86400000, default 30000.
   */
  leaseMs?: number;
  /**
   * With partitions: how long a consumer's lease on a partition lasts without renewal, ms (renewed
   * every fifth of it). A consumer that dies leaves its partitions to the others after about this
   * long. 500-600000, default 5000.
   */
  partitionLeaseMs?: number;
}

const CONSUMER_ID = /^[A-Za-z0-9._-]{1,64}$/;

function whole(options: CreateConsumerOptions, name: 'batchSize' | 'threads' | 'lanes' | 'maxAttempts' | 'dedupeWindowMs' | 'aggregateHorizonMs' | 'handlerTimeoutMs' | 'leaseMs' | 'partitionLeaseMs', min: number, max: number): void {
  const value = options[name];
  if (value !== undefined && (!Number.isInteger(value) || value < min || value > max)) {
    throw new ConfigError(`createConsumer: ${name} must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
}

/** Checks the options, without touching Redis: a ConfigError (exit 2) saying what is wrong. */
export function checkConsumerOptions(options: CreateConsumerOptions): void {
  if (typeof options !== 'object' || options === null) throw new ConfigError('createConsumer: pass the options object { redis, handlers, ... }');
  const clients = typeof options.redis === 'object' && options.redis !== null ? partitionsOf(options.redis).clients : [];
  if (clients.length === 0 || clients.some((client) => typeof client?.duplicate !== 'function')) throw new ConfigError('createConsumer: redis must be an ioredis connection, or partitions (connectPartitions)');
  if (!(options.handlers instanceof URL)) {
    const wrong = notAHandlerSet(options.handlers);
    if (wrong) throw new ConfigError(`createConsumer: handlers ${wrong}`);
  }
  if (options.consumerId !== undefined && !CONSUMER_ID.test(options.consumerId)) {
    throw new ConfigError(`createConsumer: consumerId must be 1-64 letters, digits, ".", "_" or "-", got ${JSON.stringify(options.consumerId)}`);
  }
  whole(options, 'batchSize', 1, 100_000);
  whole(options, 'threads', 1, 64);
  whole(options, 'lanes', 1, 64);
  whole(options, 'maxAttempts', 1, 1000);
  whole(options, 'dedupeWindowMs', 1000, 2 ** 31 * 1000);
  whole(options, 'aggregateHorizonMs', 1000, 2 ** 31 * 1000);
  const windowMs = options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS;
  if (options.aggregateHorizonMs !== undefined && options.aggregateHorizonMs < windowMs) {
    throw new ConfigError(`createConsumer: aggregateHorizonMs (${options.aggregateHorizonMs}) must be at least the dedupe window (${windowMs} ms)`);
  }
  whole(options, 'handlerTimeoutMs', 1, 2 ** 31 - 1);
  whole(options, 'leaseMs', 1, 86_400_000);
  whole(options, 'partitionLeaseMs', 500, 600_000);
  const databaseMode = !(options.handlers instanceof URL) && options.handlers.mode === 'database';
  if (databaseMode && options.database === undefined) {
    throw new ConfigError("createConsumer: a database handler set needs database: the consumer's own SQLite file (a path) or a better-sqlite3 connection");
  }
  if (databaseMode && options.aggregateHorizonMs !== undefined) {
    throw new ConfigError('createConsumer: aggregateHorizonMs is for a Redis handler set; database mode keeps its guards');
  }
  if (!databaseMode && (options.database !== undefined || options.leaseMs !== undefined)) {
    throw new ConfigError('createConsumer: database and leaseMs are for a database handler set (defineDatabaseHandlers)');
  }
  if (options.database !== undefined && !(typeof options.database === 'string' && options.database.length > 0) && typeof (options.database as Database)?.prepare !== 'function') {
    throw new ConfigError('createConsumer: database must be a file path or a better-sqlite3 connection');
  }
  if (options.cpuCostMs !== undefined && !(options.cpuCostMs >= 0 && options.cpuCostMs <= 10_000)) {
    throw new ConfigError(`createConsumer: cpuCostMs must be a number of ms from 0 to 10000, got ${String(options.cpuCostMs)}`);
  }
}

/** How often a handler task still waiting for a thread is looked at again (its timeout not running yet), ms. */
const QUEUED_CHECK_MS = 250;

/** What a rejected pool task means, in the words of the log line. */
function taskError(error: Error, timeoutMs: number): Error {
  return error.name === 'AbortError' ? new Error(`handler timed out after ${timeoutMs} ms (its worker thread was stopped)`) : new Error(`handler task lost: ${error.message}`);
}

/** What the long-running consumer needs besides the options: see `startConsumer`. */
export type StartOptions = Omit<RunConsumerOptions, keyof ConsumerOptions | 'consumerId'> & {
  log: Logger;
  /**
   * Opens the connection the consumer takes with (BLMOVE): one that fails fast instead of
   * reconnecting. With partitions, given the partition's key tag (`RedisConnectOptions.partition`).
   */
  connectBlocking: (partition: string) => Promise<Redis>;
};

/**
 * Consumes partitions by lease (one `startConsumer` per partition held); one partition is consumed directly.
 *
 * With leases, an idle take waits at most a quarter of the lease. A wait is Redis's: a consumer
 * stopped (SIGSTOP) while its BLMOVE waits still takes the next event when it arrives. Had that wait
 * outlived the lease, the event could arrive after another consumer took the partition over, into a
 * processing list the new holder had already dispatched at its take: with the same consumer id that
 * list is the new holder's own, which nothing dispatches again. Renewals come every fifth of the lease
 * and a round of them can take up to about three eighths more, so the wait must end before the lease
 * does even when it began just before a late renewal. And no take is sent that could end after the
 * lease as last renewed (`heldUntil`, drive-rounds.ts): one that wakes from a stall waits for its renewal.
 */
function startOnPartitions(partitions: Partitions, consumerId: string, leaseMs: number | undefined, { log, connectBlocking, ...run }: StartOptions, startOne: StartOne) {
  if (partitions.count === 1) return startOne(partitions.clients[0], () => connectBlocking(''), log, run);
  const lease = leaseMs ?? DEFAULT_PARTITION_LEASE_MS;
  const cap = lease / 4 / 1000;
  // (0 would be BLMOVE's "wait for ever": the cap then.)
  const asked = run.blockTimeoutSeconds ?? 1;
  const blockTimeoutSeconds = asked > 0 ? Math.min(asked, cap) : cap;
  return startPartitionedConsumer(partitions, {
    consumerId,
    leaseMs: lease,
    log,
    startOne: (index, redis, heldUntil) => startOne(redis, () => connectBlocking(partitionTagOfConnection(redis)), log, { ...run, blockTimeoutSeconds, partition: index, heldUntil }),
  });
}

type StartOne = (redis: Redis, connectBlocking: () => Promise<Redis>, log: Logger, run: Omit<StartOptions, 'log' | 'connectBlocking'> & { partition?: number }) => ReturnType<typeof startConsumer>;

/**
 * The consumer of your events: takes from `outbox.events`, runs your handlers (one per event type),
 * and applies each event's effects exactly once, in seq order per aggregate, in the same atomic step
 * as its dedupe marker, its `processed` entry and its ack. Checks the options (and loads a handlers
 * module) before it touches Redis.
 *
 * `drain()` consumes until the queue is empty (a CLI, a batch job); `start()` runs until stopped
 * (an app: BLMOVE when idle, heartbeat, reclaims the processing lists of consumers that are gone).
 */
export async function createConsumer(options: CreateConsumerOptions) {
  checkConsumerOptions(options);
  const partitions = partitionsOf(options.redis);
  const consumerId = options.consumerId ?? 'consumer';
  if (!(options.handlers instanceof URL) && options.handlers.mode === 'database') return databaseConsumer(options, options.handlers, consumerId);
  const onPool = options.handlers instanceof URL;
  const threads = options.threads ?? 2;
  const timeoutMs = options.handlerTimeoutMs ?? 5_000;
  const cpuCostMs = options.cpuCostMs ?? 0;
  let pool: Piscina | undefined;
  let handler: ConsumerOptions['handler'];

  if (options.handlers instanceof URL) {
    const module = options.handlers.href;
    // A fixed pool: piscina's default idleTimeout of 0 would stop an idle thread and start it
    // again (module loading included) for the next task, adding tens of ms of latency.
    // Imported here: a consumer that runs its handlers in this thread (the CLI) does not load piscina.
    const { Piscina: Pool } = await import('piscina');
    const workers = new Pool({ filename: new URL('./handler-worker.js', import.meta.url).href, minThreads: threads, maxThreads: threads, idleTimeout: 60_000 });
    pool = workers;
    // Each thread loads the module now, with a task of no events (one each: a busy thread takes no
    // second task): the first round does not wait for, or share the CPU with, module loading, and a
    // module that is not there, exports no set or does not load on a thread fails here, before
    // Redis is touched. (Not loaded in this thread as well: that would only delay the start.)
    await Promise.all(Array.from({ length: threads }, () => workers.run({ module, events: '[]', attempts: [], cpuCostMs: 0 } satisfies HandlerTask))).catch(async (error: Error) => {
      await workers.destroy();
      // The thread's loadHandlerSet names the module; a thread that died loading it does not.
      throw new ConfigError(error.message.startsWith('handlers module ') ? error.message : `handlers module ${module} cannot be loaded on a worker thread: ${error.message}`);
    });
    handler = async (events: OutboxEvent[], attempts: number[]) => {
      const startedAt = new BigInt64Array(new SharedArrayBuffer(8));
      const task: HandlerTask = { module, events: encodeEvents(events), attempts, cpuCostMs, fault: options.fault?.(), startedAt: startedAt.buffer as SharedArrayBuffer };
      // The timeout counts from when a thread starts the task (it sets `startedAt`), not from when
      // it was sent: the wait for a thread (behind the other lanes, the rounds of the other
      // partitions, a thread started again) is not the handler's. Counted from the send, a pool
      // whose queue is longer than the timeout stopped threads and failed handlers that had not
      // run, and every event of their lanes went back for a retry, a task each, queued again.
      // A timer cleared when the task settles: AbortSignal.timeout's would stay armed (and its
      // signal alive) for the whole timeout, thousands of them at a few hundred tasks a second.
      const timeout = new AbortController();
      const check = () => {
        const started = Number(Atomics.load(startedAt, 0));
        const left = started === 0 ? Math.min(timeoutMs, QUEUED_CHECK_MS) : started + timeoutMs - Date.now();
        if (started !== 0 && left <= 0) timeout.abort();
        else timer = setTimeout(check, left).unref();
      };
      let timer = setTimeout(check, timeoutMs).unref();
      let results: string;
      try {
        results = (await workers.run(task, { signal: timeout.signal })) as string;
      } catch (error) {
        throw taskError(error as Error, timeoutMs);
      } finally {
        clearTimeout(timer);
      }
      return decodeResults(results);
    };
  } else {
    const set = options.handlers as RedisHandlerSet;
    handler = (events: OutboxEvent[]) => runRedisHandlers(set, events, { cpuCostMs });
  }
  // A consumer of the wrong number of partitions would leave queues unconsumed: refused once the
  // options are known good (the first thing that touches Redis), before it takes anything.
  try {
    await checkPartitionLayout(partitions);
  } catch (error) {
    await pool?.destroy();
    throw error;
  }

  const engineOptions: ConsumerOptions & { consumerId: string } = {
    consumerId,
    handler,
    batchSize: options.batchSize ?? 1000,
    lanes: options.lanes ?? (onPool ? threads : 1),
    maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    dedupeWindowMs: options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS,
    aggregateHorizonMs: options.aggregateHorizonMs,
    onProblem: options.onProblem,
  };
  const engines = partitions.clients.map((redis) => createConsumerEngine(redis, engineOptions));

  return {
    consumerId,
    processingList: engines[0].processingList,
    /** Recovers this consumer's processing list, then consumes until the queue is empty and no event waits for a retry (every partition, at once). */
    drain: (onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> => drainAll(engines.map((engine) => (report) => engine.drain(report)), onRound),
    /** Runs until `stop()` on the result. */
    start: (start: StartOptions) =>
      startOnPartitions(partitions, consumerId, options.partitionLeaseMs, start, (redis, connectBlocking, log, run) =>
        startConsumer(redis, connectBlocking, log, { ...engineOptions, ...run }),
      ),
    /** Stops the worker threads (after `drain` or the started consumer's `stop`). The connection is the caller's. */
    close: async (): Promise<void> => {
      await pool?.destroy();
    },
  };
}

/**
 * Database mode (inbox/): claim → handler + inbox row in the consumer's own database → complete,
 * in this thread. The same drain, start and close as Redis mode.
 */
async function databaseConsumer(options: CreateConsumerOptions, set: DatabaseHandlerSet, consumerId: string) {
  const partitions = partitionsOf(options.redis);
  // Imported here: a Redis-mode consumer (and the CLI's --help) does not load better-sqlite3.
  const [{ createDatabaseConsumer }, { openConsumerDatabase, requireInbox }] = await Promise.all([import('./inbox/database-consumer.js'), import('./inbox/consumer-database.js')]);
  // Opened now, so that a bad path, a missing file or a database without its inbox fails here, in
  // one line (StoreUnavailableError), not at the first round. Never created: see createConsumerDatabase.
  const owned = typeof options.database === 'string' ? openConsumerDatabase(options.database) : requireInbox(options.database as Database) && undefined;
  // The file it opened: a round writes nothing once the path names another file, or none.
  const path = typeof options.database === 'string' ? options.database : undefined;
  const opened = path === undefined ? undefined : identityOf(path);
  const isLive = path === undefined ? undefined : () => same(opened, identityOf(path));
  const db = owned ?? (options.database as Database);
  await checkPartitionLayout(partitions).catch((error: unknown) => {
    owned?.close();
    throw error;
  });
  const make = (redis: Redis, onProblem?: (problem: string) => void) =>
    createDatabaseConsumer(redis, {
      database: db,
      deliver: (event) => {
        const delivery = deliver(set, event);
        return 'poison' in delivery ? delivery : { delivered: delivery.delivered, handler: delivery.handler as (event: never, db: Database) => unknown };
      },
      consumerId,
      batchSize: options.batchSize ?? 1000,
      lanes: options.lanes ?? 1,
      maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      dedupeWindowMs: options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS,
      leaseMs: options.leaseMs,
      onProblem,
      isLive,
      databasePath: path,
    });
  return {
    consumerId,
    processingList: keys.processing(consumerId),
    /** Recovers this consumer's processing list, then consumes until the queue is empty and no event waits (for a retry, or for a dead consumer's lease). */
    drain: (onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> =>
      drainAll(partitions.clients.map((redis) => (report) => make(redis, options.onProblem).drain(report)), onRound),
    /** Runs until `stop()` on the result. */
    start: (start: StartOptions) =>
      startOnPartitions(partitions, consumerId, options.partitionLeaseMs, start, (redis, connectBlocking, log, run) =>
        startConsumer(redis, connectBlocking, log, {
          consumerId,
          batchSize: options.batchSize,
          dedupeWindowMs: options.dedupeWindowMs,
          ...run,
          engine: (onProblem) => make(redis, (problem) => (onProblem(problem), options.onProblem?.(problem))),
        }),
      ),
    /** Closes the consumer's database when it opened it (given a path). The connection is the caller's. */
    close: async (): Promise<void> => {
      if (owned?.open) owned.close();
    },
  };
}

export type OutboxConsumer = Awaited<ReturnType<typeof createConsumer>>;

/**
 * Drains every partition at once; resolves the counts summed. `onRound` is told the running sums
 * after any partition's round.
 */
async function drainAll(drains: ((onRound: (stats: ConsumeStats) => void) => Promise<ConsumeStats>)[], onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> {
  if (drains.length === 1) return drains[0]((stats) => onRound?.(stats));
  const each = drains.map(() => emptyStats());
  const total = () => sumCounters(emptyStats(), each);
  const results = await Promise.all(
    drains.map((drain, index) =>
      drain((stats) => {
        each[index] = { ...stats };
        onRound?.(total());
      }),
    ),
  );
  results.forEach((stats, index) => (each[index] = stats));
  return total();
}
