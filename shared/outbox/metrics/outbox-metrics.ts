import { within } from '../sleep.js';
import type { Redis } from 'ioredis';
import type { Metric, Registry } from 'prom-client';
import type { Pool } from 'pg';
import type { Db } from '../store/open-database.js';
import type { OutboxEvent } from '../store/events.js';
import { keys } from '../redis/keys.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { labelHistogram } from './label-histogram.js';

/**
 * The cumulative counts of one running consumer, as it keeps them anyway (consumer-stats.ts):
 * /metrics reads them when scraped, so the consumer's rounds pay nothing for the metrics.
 */
export interface ConsumerCounts {
  applied: number;
  duplicates: number;
  parked: number;
  dead: number;
  failed: number;
  retried: number;
  errors: number;
}

export interface OutboxMetricsOptions {
  /** The prom-client registry to register on (e.g. your service's). Default: a new one. */
  registry?: Registry;
  /** Also collect prom-client's process and Node.js metrics (CPU, memory, event loop lag) on it. Default false. */
  processMetrics?: boolean;
  /** How long a scrape waits for Redis (queue length, in flight) before it leaves those gauges out, ms. Default 500. */
  redisTimeoutMs?: number;
}

/** Buckets of the relay's batch duration, seconds: a batch of 1000 rows takes a few ms. */
const BATCH_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** Buckets of commit → applied, seconds: milliseconds while the pipeline keeps up, minutes in a backlog. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** PENDING rows and the age of the oldest (by id, through the partial index), ms; age 0 when none. */
export function pendingOf(db: Db, now = Date.now()): { pending: number; oldestAgeMs: number } {
  const pending = db.prepare("SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'").pluck().get() as number;
  const oldest = pending === 0 ? undefined : (db.prepare("SELECT created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1").pluck().get() as number | undefined);
  return { pending, oldestAgeMs: oldest === undefined ? 0 : Math.max(0, now - oldest) };
}

/** `pendingOf` on PostgreSQL: one query through the partial index on PENDING ids. */
export async function pgPendingOf(pool: Pool, now = Date.now()): Promise<{ pending: number; oldestAgeMs: number }> {
  const { rows } = await pool.query<{ pending: string; oldest: string | null }>(
    "SELECT COUNT(*) AS pending, (SELECT created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1) AS oldest FROM outbox WHERE status = 'PENDING'",
  );
  const oldest = rows[0].oldest;
  return { pending: Number(rows[0].pending), oldestAgeMs: oldest === null ? 0 : Math.max(0, now - Number(oldest)) };
}

/**
 * The outbox's Prometheus metrics on a prom-client registry (docs/metrics.md lists them).
 * Counters move where the thing happens: the relay per batch (`createRelay({ metrics })`), the
 * consumer's counts read at scrape from the numbers it keeps (`consumer.start({ metrics })`), its
 * commit → applied latency observed per round. Gauges that need a query (PENDING rows, the queue,
 * the processing lists) are read when scraped, from the stores `watchStore` / `watchQueue` name.
 * Async because prom-client is loaded only here: importing the library does not pay for it.
 */
export async function createOutboxMetrics(options: OutboxMetricsOptions = {}) {
  const client = await import('prom-client');
  const registry = options.registry ?? new client.Registry();
  const redisTimeoutMs = options.redisTimeoutMs ?? 500;
  if (options.processMetrics) client.collectDefaultMetrics({ register: registry });
  // Each metric is registered once something reports it (`use`): an app shows only what it does.
  const registers: Registry[] = [];
  const used = new Set<Metric>();
  const use = (...metrics: Metric[]) => {
    for (const metric of metrics) {
      if (used.has(metric)) continue;
      used.add(metric);
      registry.registerMetric(metric);
    }
  };

  /** The watched store's figures now; undefined when there is none to read. */
  let storeSource: (() => Promise<{ pending: number; oldestAgeMs: number } | undefined>) | undefined;
  let queueSource: readonly Redis[] | undefined;
  /** Every consumer started in this process: its counts stay after it stopped (a counter does not go back). */
  const consumers = new Map<string, ConsumerCounts>();
  /** The processing lists of the consumers running now. */
  const inFlight = new Map<string, { redis: Redis; processingList: string }>();

  // Relay: counted per batch where the relay marks it (relay.ts).
  const pushed = new client.Counter({
    name: 'outbox_relay_events_pushed_total',
    help: 'Events the relay pushed onto the queue and marked PUBLISHED (a batch pushed again after a crash counts again)',
    registers,
  });
  const batchDuration = new client.Histogram({
    name: 'outbox_relay_batch_duration_seconds',
    help: 'One relay batch: read the PENDING rows, push them to Redis, mark them PUBLISHED',
    buckets: BATCH_BUCKETS,
    registers,
  });
  const stateLosses = new client.Counter({
    name: 'outbox_redis_state_losses_total',
    help: 'Times the relay found that Redis lost its state (no outbox:meta while app.db has published events) and rebuilt it from SQLite',
    registers,
  });

  // Gauges read at scrape. prom-client asks each metric; the four share one read.
  let gauges: Promise<void> | undefined;
  const collect = () => (gauges ??= collectGauges().finally(() => (gauges = undefined)));
  const pendingGauge = new client.Gauge({ name: 'outbox_pending_events', help: 'Outbox rows still PENDING in the store (app.db or PostgreSQL)', registers, collect });
  const oldestGauge = new client.Gauge({ name: 'outbox_oldest_pending_age_seconds', help: 'Age of the oldest PENDING outbox row (0 when none): how far the relay is behind', registers, collect });
  const queueGauge = new client.Gauge({ name: 'outbox_queue_length', help: 'Messages waiting in the queue (LLEN outbox.events)', registers, collect });
  const inFlightGauge = new client.Gauge({ name: 'outbox_in_flight_messages', help: "Messages in a running consumer's processing list: taken, not acked yet", labelNames: ['consumer'], registers, collect });

  /**
   * Reads the gauges of the watched store and queue, and of the running consumers' processing lists
   * (Redis and PostgreSQL at most `redisTimeoutMs`). What cannot be read now (no live app.db, Redis or PostgreSQL not answering)
   * is NaN in this scrape.
   */
  async function collectGauges(): Promise<void> {
    let store: { pending: number; oldestAgeMs: number } | undefined;
    try {
      if (storeSource) store = await within(storeSource(), redisTimeoutMs);
    } catch {
      // app.db closed or replaced meanwhile, PostgreSQL not answering: NaN below.
    }
    pendingGauge.set(store?.pending ?? NaN);
    oldestGauge.set(store === undefined ? NaN : store.oldestAgeMs / 1000);
    inFlightGauge.reset();
    const reads: Promise<void>[] = [];
    if (queueSource) {
      // Summed over the partitions (one Redis: its queue).
      const lengths = Promise.all(queueSource.map((redis) => redis.llen(keys.events))).then((each) => each.reduce((a, b) => a + b, 0));
      reads.push(within(lengths, redisTimeoutMs).then((n) => queueGauge.set(n), () => queueGauge.set(NaN)));
    }
    for (const [consumer, c] of inFlight) {
      reads.push(within(c.redis.llen(c.processingList), redisTimeoutMs).then((n) => inFlightGauge.set({ consumer }, n), () => inFlightGauge.set({ consumer }, NaN)));
    }
    await Promise.all(reads);
  }

  // Consumer: its own cumulative counts, mirrored at scrape.
  const consumerCounter = (name: string, help: string, count: keyof ConsumerCounts) =>
    new client.Counter<'consumer'>({
      name,
      help,
      labelNames: ['consumer'],
      registers,
      collect() {
        this.reset();
        for (const [consumer, counts] of consumers) this.inc({ consumer }, counts[count]);
      },
    });
  const consumerMetrics: Metric[] = [
    consumerCounter('outbox_events_applied_total', 'Events whose effects the consumer applied (each event once)', 'applied'),
    consumerCounter('outbox_duplicates_skipped_total', 'Messages skipped because their event was already applied (at-least-once delivery absorbed)', 'duplicates'),
    consumerCounter('outbox_events_parked_total', 'Events parked because an earlier seq of their aggregate had not been applied yet', 'parked'),
    consumerCounter('outbox_events_dead_lettered_total', 'Messages moved to the dead-letter list (unreadable, refused by their handler, or out of attempts)', 'dead'),
    consumerCounter('outbox_handler_failures_total', 'Handler attempts that failed (threw, timed out, lost their worker thread)', 'failed'),
    consumerCounter('outbox_handler_retries_total', 'Failed handler attempts followed by another attempt (the others dead-lettered the event)', 'retried'),
    consumerCounter('outbox_consumer_errors_total', 'Failed takes and rounds (Redis gone, a key of the wrong type) and bad state met in Redis', 'errors'),
  ];
  // Observed per applied event: a histogram that does not hash its labels on every observation.
  const latency = labelHistogram(
    'outbox_commit_to_applied_seconds',
    "From the event's commit in app.db (its created_at, the producer's clock) to the consumer seeing it applied (the consumer's clock)",
    'consumer',
    LATENCY_BUCKETS,
  );
  consumerMetrics.push(latency);

  return {
    registry,
    /** The content type of `text()`, for the HTTP answer. */
    contentType: registry.contentType,
    /** The exposition text of every metric on the registry: what GET /metrics answers. */
    text: (): Promise<string> => registry.metrics(),

    /**
     * Reports PENDING rows and the oldest one's age from `db`, or from the database the function
     * returns at scrape (null: none now, NaN), or from a PostgreSQL store's pool (NaN when it does
     * not answer within the Redis timeout).
     */
    watchStore(db: Db | (() => Db | null) | Pool): void {
      if (typeof db === 'function') {
        storeSource = async () => {
          const current = db();
          return current ? pendingOf(current) : undefined;
        };
      }
      else if ('prepare' in db) storeSource = async () => pendingOf(db);
      else storeSource = () => pgPendingOf(db);
      use(pendingGauge, oldestGauge);
    },
    /** Reports the queue's length through `redis` (in its namespace), or the sum over the partitions. */
    watchQueue(redis: Redis | Partitions): void {
      queueSource = partitionsOf(redis).clients;
      use(queueGauge);
    },

    /** A relay runs (`createRelay`): its counters show from 0. */
    relayStarted(): void {
      use(pushed, batchDuration, stateLosses);
    },

    /** The relay marked a batch of `events` PUBLISHED, `seconds` after it started reading it. */
    batchRelayed(events: number, seconds: number): void {
      pushed.inc(events);
      batchDuration.observe(seconds);
    },
    /** The relay found that Redis lost its state and rebuilt it. */
    stateLost(): void {
      stateLosses.inc();
    },

    /**
     * A consumer runs: its counts (read at scrape, labelled with its id) and its processing list
     * (in flight, while it runs). Resolves the function that tells it stopped.
     */
    consumerStarted(consumerId: string, counts: ConsumerCounts, redis: Redis, processingList: string): () => void {
      consumers.set(consumerId, counts);
      inFlight.set(consumerId, { redis, processingList });
      latency.observer(consumerId); // its series shows from 0
      use(...consumerMetrics, inFlightGauge);
      return () => inFlight.delete(consumerId);
    },
    /**
     * A round was answered: observes commit → applied for each of its applied events (a message
     * queued before events carried their commit time has none, and is skipped). Once per round.
     */
    roundAnswered(consumerId: string, handled: readonly { outcome?: string; event?: OutboxEvent }[], now = Date.now()): void {
      const observe = latency.observer(consumerId);
      for (const { outcome, event } of handled) {
        if (outcome === 'applied' && event?.createdAt !== undefined) observe(Math.max(0, now - event.createdAt) / 1000);
      }
    },
  };
}

export type OutboxMetrics = Awaited<ReturnType<typeof createOutboxMetrics>>;
