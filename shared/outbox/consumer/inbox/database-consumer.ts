import { StoreUnavailableError } from '../../errors/store-unavailable-error.js';
import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { keys } from '../../redis/keys.js';
import { deadLetter, moveToProcessing } from '../../redis/scripts.js';
import type { Db } from '../../store/open-database.js';
import type { OutboxEvent } from '../../store/events.js';
import { DEFAULT_DEDUPE_WINDOW_MS, markerTtlOf, sweepWindow } from '../../redis/dedupe-window.js';
import { DEFAULT_MAX_ATTEMPTS, emptyStats, type ConsumeStats } from '../consumer.js';
import { readEntry } from '../decode-entry.js';
import { startHeartbeat } from '../heartbeats.js';
import { driveRounds, takingConnection } from '../drive-rounds.js';
import { createRetryQueue } from '../retries.js';
import { openConsumerDatabase, requireInbox } from './consumer-database.js';
import { deliverByType, type DatabaseHandlerSet, type Delivery } from './database-handlers.js';
import { aggregateKeyOf, executeLane, laneOf, type InboxContext, type InboxItem, type InboxOutcome } from './execute-lane.js';

export const DEFAULT_LEASE_MS = 30_000;

export interface DatabaseConsumerOptions {
  /** The consumer's own SQLite database, with its inbox table (createConsumerDatabase): a path (never created here) or a connection the caller opened. */
  database: string | Db;
  /**
   * How an event reaches its handler: the handler and the event as it gets it, or why it is poison.
   * Either `handlers` (each event goes to the handler of its type, as parsed: `deliverByType`) or
   * `deliver` (the public API's: the payload checked against its declaration).
   */
  handlers?: DatabaseHandlerSet;
  deliver?: (event: OutboxEvent) => Delivery;
  /** As the engine's (consumer.ts): processing list name. Default 'cli'. */
  consumerId?: string;
  /** Messages taken per round. Default 1000. */
  batchSize?: number;
  /** Lanes a round is split into by aggregate (hash of its key); they overlap their Redis round trips. Default 1. */
  lanes?: number;
  /** Attempts a throwing handler gets before its event is dead-lettered. Default 5. */
  maxAttempts?: number;
  /** How long an event's records are kept, ms (the completed marker's TTL). Default 7 days. */
  dedupeWindowMs?: number;
  /**
   * How long a claim holds an event, ms: a process that dies between claim and complete leaves it
   * claimed this long, then another attempt takes it. Longer than the slowest handler. Default 30 s.
   */
  leaseMs?: number;
  onProblem?: (problem: string) => void;
  /**
   * Whether the database file is still the one opened (not deleted or replaced): a round writes
   * nothing while it is not, its messages stay in the processing list. Default: always.
   */
  isLive?: () => boolean;
  /** The database's path, named when it is no longer the live file. */
  databasePath?: string;
}

/** The engine's counters, plus events found claimed by another (maybe dead) process, waiting for its lease. */
export type DatabaseConsumeStats = ConsumeStats & { busy: number };

/** The engine's counters as the long-running loop keeps them (without `busy`), or this driver's. */
export type AnyStats = ConsumeStats & { busy?: number };

const STAT_OF: Record<InboxOutcome, keyof DatabaseConsumeStats> = {
  applied: 'applied',
  duplicate: 'duplicates',
  parked: 'parked',
  dead: 'dead',
  foreign: 'dead',
  stale: 'stale',
  invalid: 'invalid',
  retry: 'retried',
  busy: 'busy',
};

export function emptyDatabaseStats(): DatabaseConsumeStats {
  return { ...emptyStats(), busy: 0 };
}

export interface DatabaseConsumer {
  consumerId: string;
  processingList: string;
  /** This process's claim token (the value of the markers it claims). */
  owner: string;
  /** The consumer's own database (the handlers' `db`). */
  db: Db;
  handleRound(entries: Buffer[], stats: AnyStats, options?: { recovered?: boolean }): Promise<InboxItem[]>;
  sendRound(entries: Buffer[], stats: AnyStats, options?: { recovered?: boolean }): Promise<{ answered: Promise<InboxItem[]> }>;
  /** Moves up to `batchSize` messages into the processing list; resolves what was moved. */
  take(connection: Redis): Promise<Buffer[]>;
  drain(onRound?: (stats: DatabaseConsumeStats) => void): Promise<DatabaseConsumeStats>;
  /** Ms until an event waiting for a retry or a lease is due (0: now), null when none waits. */
  nextRetryInMs(): number | null;
  forgetRetries(): void;
  /** Closes the database when this consumer opened it (given a path). */
  close(): void;
}

/**
 * Database mode's driver (brief decision 6), on the engine's machinery: the processing list and
 * its recovery, `take`, the attempts hash and `handler-failed`, the dead-letter list, the retry
 * queue, heartbeats. What differs from consumer.ts is the step per event: claim → handler in the
 * consumer's own database with the inbox row → complete (execute-lane.ts), instead of handlers
 * then apply-events. Same shape as the engine's consumer, so a public `createConsumer` can pick it.
 */
export function createDatabaseConsumer(redis: Redis, options: DatabaseConsumerOptions): DatabaseConsumer {
  const deliver = options.deliver ?? (options.handlers && deliverByType(options.handlers));
  if (!deliver) throw new TypeError('createDatabaseConsumer: pass handlers or deliver');
  const consumerId = options.consumerId ?? 'cli';
  const batchSize = options.batchSize ?? 1000;
  const lanes = Math.max(1, options.lanes ?? 1);
  const processingList = keys.processing(consumerId);
  const ownsDb = typeof options.database === 'string';
  // A connection the caller opened keeps its own settings; one without the inbox table is refused.
  const db = typeof options.database === 'string' ? openConsumerDatabase(options.database) : requireInbox(options.database);
  const waiting = createRetryQueue();
  const context: InboxContext = {
    redis,
    processingList,
    db,
    deliver,
    // Per process: a restarted consumer is another owner, so what its predecessor claimed waits for the lease.
    owner: `${consumerId}:${process.pid}:${randomUUID().slice(0, 8)}`,
    leaseMs: options.leaseMs ?? DEFAULT_LEASE_MS,
    markerTtlSeconds: markerTtlOf(options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS),
    maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    onProblem: options.onProblem,
  };

  function parse(entries: Buffer[]): { items: InboxItem[]; bad: { raw: string | Buffer; reason: string }[] } {
    const items: InboxItem[] = [];
    const bad: { raw: string | Buffer; reason: string }[] = [];
    for (const entry of entries) {
      const read = readEntry(entry);
      if ('event' in read) items.push({ ...read, attempt: 1 });
      else bad.push(read);
    }
    return { items, bad };
  }

  /** Sets `attempt` on messages read back from the processing list: failed attempts counted in Redis, plus one. */
  async function loadAttempts(items: InboxItem[]): Promise<void> {
    if (items.length === 0) return;
    const counts = await redis.hmget(keys.attempts, ...items.map((p) => p.event.eventId));
    items.forEach((p, i) => (p.attempt = Number(counts[i] ?? 0) + 1));
  }

  /**
   * Handles a round: bad entries are dead-lettered, events due for a retry go first, then the
   * lanes run (in parallel with each other, each in order). Resolves each event's outcome; an
   * event that failed or found another's claim waits in the retry queue (and the processing list).
   */
  async function handleRound(entries: Buffer[], stats: AnyStats, { recovered = false } = {}): Promise<InboxItem[]> {
    // SQLite goes on writing into a deleted or replaced file, and nobody would read it again.
    if (options.isLive && !options.isLive()) {
      throw new StoreUnavailableError(
        `the consumer database ${options.databasePath ?? ''} was deleted or replaced under the consumer: it writes no more; ` +
          'stop it, put the file back or start it on a new one, then run "outbox verify --consumer-db <file>"',
      );
    }
    const { items: taken, bad } = parse(entries);
    if (recovered) await loadAttempts(taken);
    const retries = waiting.removeDue(Date.now()).map((w): InboxItem => ({ raw: w.raw, event: w.event, attempt: w.attempts + 1 }));
    const items = [...retries, ...taken];
    const tasks = Array.from({ length: lanes }, () => [] as InboxItem[]);
    for (const item of items) tasks[laneOf(aggregateKeyOf(item.event), lanes)].push(item);
    const [deadOutcomes] = await Promise.all([
      Promise.all(bad.map(async ({ raw, reason }) => ((await deadLetter(redis, processingList, raw, reason)) ? 'dead' : 'stale') as InboxOutcome)),
      ...tasks.map((task) => executeLane(context, task)),
    ]);
    stats.received += entries.length;
    const count = (outcome: InboxOutcome) => (stats[STAT_OF[outcome]] = (stats[STAT_OF[outcome]] ?? 0) + 1);
    deadOutcomes.forEach(count);
    const now = Date.now();
    for (const item of items) {
      count(item.outcome!);
      if (item.handlerFailed) stats.failed += 1;
      if (item.outcome === 'retry') waiting.add({ raw: item.raw, event: item.event, attempts: item.attempt, dueAt: now + item.retryInMs! });
      // Not a failed attempt: the same attempt again, once the other process's lease is over.
      if (item.outcome === 'busy') waiting.add({ raw: item.raw, event: item.event, attempts: item.attempt - 1, dueAt: now + item.retryInMs! });
    }
    return items;
  }

  /**
   * The engine's round interface, for the long-running loop (run-consumer.ts): resolves at once;
   * `answered` once the round is done. Rounds run one after another (the next one is taken
   * meanwhile), so that an aggregate's next event is not claimed while its previous one is in flight.
   */
  let tail: Promise<unknown> = Promise.resolve();
  async function sendRound(entries: Buffer[], stats: AnyStats, options: { recovered?: boolean } = {}): Promise<{ answered: Promise<InboxItem[]> }> {
    const answered = tail.then(() => handleRound(entries, stats, options));
    tail = answered.catch(() => {});
    return { answered };
  }

  const rounds = {
    processingList,
    sendRound,
    take: (connection: Redis): Promise<Buffer[]> => moveToProcessing(connection, processingList, batchSize),
    nextRetryInMs: () => waiting.nextDueInMs(Date.now()),
    forgetRetries: () => waiting.clear(),
  };

  /**
   * Dispatches what a previous run left in the processing list, then consumes until the queue is
   * empty and no event waits (for a retry or for another process's lease): the app's loop
   * (drive-rounds.ts) in its drain mode. Rounds run one after another (sendRound).
   */
  async function drain(onRound?: (stats: DatabaseConsumeStats) => void): Promise<DatabaseConsumeStats> {
    const stopHeartbeat = startHeartbeat(redis, consumerId);
    const stats = emptyDatabaseStats();
    try {
      await driveRounds(redis, rounds, { until: 'empty', connect: () => takingConnection(redis), stats, onRound: () => onRound?.(stats) }).done;
      // As the Redis-mode drain: it sweeps what the window has let go.
      await sweepWindow(redis, options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS);
      return stats;
    } finally {
      await stopHeartbeat();
    }
  }

  return {
    consumerId,
    owner: context.owner,
    db,
    handleRound,
    ...rounds,
    drain,
    close(): void {
      if (ownsDb) db.close();
    },
  };
}

