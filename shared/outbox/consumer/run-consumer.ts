import type { Redis } from 'ioredis';
import { explainError } from '../errors/explain-error.js';
import { incidentLog } from '../incident-log.js';
import { withFields, type Logger } from '../logger.js';
import { keys } from '../redis/keys.js';
import { DEFAULT_DEDUPE_WINDOW_MS, startWindowSweeps } from '../redis/dedupe-window.js';
import { checkPartitionLayout } from '../redis/partition-layout.js';
import { partitionsOf } from '../redis/partitions.js';
import { ConfigError } from '../errors/config-error.js';
import { everyInterval } from '../stats-interval.js';
import { createConsumerEngine, type ConsumerOptions } from './consumer.js';
import { driveRounds, type RoundEngine, type RoundItem } from './drive-rounds.js';
import { createConsumerStats, type ConsumerStats } from './consumer-stats.js';
import { startHeartbeat } from './heartbeats.js';
import { reclaimOrphans } from './orphans.js';
import type { OutboxMetrics } from '../metrics/outbox-metrics.js';

/** How often a consumer scans the keyspace for processing lists the takes did not record (see reclaimOrphans). */
const SCAN_EVERY_MS = 60 * 60_000;

export type { RoundEngine } from './drive-rounds.js';

/** consumer.ts's engine with these options (its `handler`), or any round engine `engine` makes. */
export type RunConsumerOptions = RunOptions & (ConsumerOptions | (Partial<ConsumerOptions> & { consumerId: string; engine: (onProblem: (problem: string) => void) => RoundEngine }));

interface RunOptions {
  consumerId: string;
  /** BLMOVE timeout in seconds: how long an idle take waits. Default 1. */
  blockTimeoutSeconds?: number;
  /** Interval of the `consumer stats` line, ms (0 = never). Default 10000. */
  statsIntervalMs?: number;
  /** This consumer's health endpoint URL (null: none), written into its heartbeat. Default none. */
  healthUrl?: () => string | null;
  /** How often to look for processing lists of consumers that are gone, ms. Default 10000. */
  reclaimEveryMs?: number;
  /** Where this consumer's counts, in-flight messages and commit → applied latency show (`createOutboxMetrics`). Default none. */
  metrics?: Pick<OutboxMetrics, 'consumerStarted' | 'roundAnswered'>;
  /** The partition this consumer runs on, when there are several: named in its log lines and metrics. */
  partition?: number;
  /** With partitions: when this partition's lease ends at the latest (drive-rounds.ts: no take that could outlast it). */
  heldUntil?: () => number;
  /** How long applied events' records are kept, ms: this consumer sweeps older ones. Default 7 days. */
  dedupeWindowMs?: number;
  /** With one, this consumer drops the guards of aggregates idle past it, ms. Default none. */
  aggregateHorizonMs?: number;
}

/**
 * The long-running consumer. It works in rounds: take what is queued (up to `batchSize`, or wait
 * with BLMOVE when nothing is), run the handlers (one after another within an aggregate, in
 * parallel across aggregates, e.g. on a worker pool), apply the round in queue order with one
 * script per chunk. The next round is taken while Redis applies the previous one.
 *
 * `connectBlocking` opens the connection for taking, one that fails fast instead of reconnecting
 * (see drive-rounds.ts, the loop a drain runs too); `redis` runs the apply scripts.
 */
export function startConsumer(redis: Redis, connectBlocking: () => Promise<Redis>, appLog: Logger, options: RunConsumerOptions) {
  const log = options.partition === undefined ? appLog : withFields(appLog, { partition: options.partition });
  // Metrics and heartbeats name the consumer on this partition (a consumer's counts are per partition).
  const metricsId = options.partition === undefined ? options.consumerId : `${options.consumerId}@p${options.partition}`;
  const blockTimeout = options.blockTimeoutSeconds ?? 1;
  const consumerStats: ConsumerStats = createConsumerStats(options.batchSize ?? 1000);
  // Each distinct problem once a minute: a corrupt field meets every round until an operator fixes it.
  const reported = new Map<string, number>();
  let lastProblem = '';
  const onProblem = (problem: string) => {
    lastProblem = problem;
    consumerStats.error();
    const now = Date.now();
    if ((reported.get(problem) ?? 0) > now - 60_000) return;
    reported.set(problem, now);
    log.error('bad state in Redis: the messages concerned stay in the processing list or go to the dead-letter list', { problem });
  };
  // The app tries a refused event again once the state is fixed; a drain leaves it and ends.
  const consumer: RoundEngine = 'engine' in options ? options.engine(onProblem) : createConsumerEngine(redis, { ...options, onProblem, retryRefused: true });
  const { processingList } = consumer;
  const stats = consumerStats.counters;
  // A key of the wrong type fails every round and every take: logged once, until it works again.
  const applyFailures = incidentLog(log);
  const takeFailures = incidentLog(log);

  const { metrics } = options;
  const metricsStopped = metrics?.consumerStarted(metricsId, stats, redis, processingList);

  function report(handled: RoundItem[]): void {
    applyFailures.clear();
    consumerStats.refused(consumer.refusedWaiting?.() ?? 0, lastProblem);
    metrics?.roundAnswered(metricsId, handled);
    for (const { outcome, event, raw, reason, attempt, retryInMs, refusals } of handled) {
      const ids = { eventId: event?.eventId, aggregateId: event?.aggregateId, seq: event?.seq };
      if (outcome === 'duplicate') log.debug('duplicate skipped', ids);
      else if (outcome === 'retry') log.warn('handler failed: the event waits in the processing list for its next attempt', { ...ids, attempt, error: reason, retryInMs });
      else if (outcome === 'parked') log.warn('gap: event parked until the missing one arrives', ids);
      else if (outcome === 'dead') log.warn('dead-lettered', { reason, message: raw.toString().slice(0, 200) });
      else if (outcome === 'foreign') log.warn('dead-lettered: the event comes from another store than the one this Redis serves', { ...ids, storeId: event?.storeId });
      else if (outcome === 'busy') log.debug('claimed by another consumer: waits for its lease', { ...ids, retryInMs });
      else if (outcome === 'invalid' && (refusals ?? 1) === 1) {
        // Once per event: it is tried again, with a backoff, until the state is fixed.
        log.error('event refused: Redis holds bad state it needs (see "bad state in Redis"); it waits in the processing list and is tried again', { ...ids, retryInMs });
      }
    }
  }

  // One line per interval at info: what happened in it, and the lag now.
  const stopStats = everyInterval(
    options.statsIntervalMs ?? 10_000,
    async () => {
      const { received, applied, duplicates, parked, dead, retried, errors } = consumerStats.interval();
      const queued = await redis.llen(keys.events).catch(() => null);
      log.info('consumer stats', { received, applied, duplicates, parked, dead, retried, errors, lagMs: consumerStats.lagMs(), queued });
    },
    log,
  );

  const stopHeartbeat = startHeartbeat(redis, options.consumerId, {
    details: async () => ({ applied: stats.applied, lagMs: consumerStats.lagMs(), queued: await redis.llen(keys.events), health: options.healthUrl?.() ?? null }),
    onBeat: (at) => consumerStats.heartbeat(at),
  });
  // From the recorded lists every 10 s, from a scan of the keyspace once an hour and at start (see
  // reclaimOrphans); on a partition, the lease's take has just scanned it (partition-leases.ts).
  const reclaim = (scan: boolean) =>
    reclaimOrphans(redis, options.consumerId, log, { scan }).catch((error: Error) => log.warn('cannot reclaim orphaned processing lists', { error: error.message }));
  void reclaim(options.partition === undefined);
  const reclaimEveryMs = options.reclaimEveryMs ?? 10_000;
  const scanEvery = Math.max(1, Math.round(SCAN_EVERY_MS / reclaimEveryMs));
  let reclaims = 0;
  const reclaimTimer = setInterval(() => void reclaim(++reclaims % scanEvery === 0), reclaimEveryMs);
  reclaimTimer.unref();
  // Without partitions nothing else looks again: relays for several partitions that claimed Redis
  // after this consumer started would feed queues it never reads. Said once, until it matches again.
  const stopLayoutWatch = options.partition === undefined ? watchLayout(redis, log) : () => {};
  const stopSweeps = startWindowSweeps(redis, options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS, log, options.aggregateHorizonMs);

  // The same loop as a drain (drive-rounds.ts), until stopped: BLMOVE when idle, a failed take or
  // round retried on a new blocking connection (one that fails fast instead of reconnecting).
  const rounds = driveRounds(redis, consumer, {
    until: 'stopped',
    connect: connectBlocking,
    stats,
    blockTimeoutSeconds: blockTimeout,
    heldUntil: options.heldUntil,
    onRound: report,
    onRecovered: (count) => log.info('processing list recovered', { processingList, count }),
    onRoundError: (error) => {
      consumerStats.error();
      applyFailures.warn('cannot apply a round, will retry', { error: explainError(error)?.message ?? error.message });
    },
    onTakeError: (error) => {
      consumerStats.error();
      takeFailures.warn('cannot take from the queue, retrying', { error: explainError(error)?.message ?? error.message });
    },
    onTaken: (count) => {
      takeFailures.clear();
      consumerStats.taken(count);
    },
    onBlocking: (blocking) => consumerStats.blocking(blocking),
  });

  return {
    stats,
    /** The app's numbers: counters, lag, heartbeat (see `createConsumerStats`). */
    consumerStats,
    processingList,
    /**
     * Stops taking, lets the rounds already sent finish, then hands what is still in the
     * processing list back to the head of the queue, in order.
     */
    async stop(): Promise<void> {
      stopStats();
      stopLayoutWatch();
      stopSweeps();
      clearInterval(reclaimTimer);
      await rounds.stop();
      let handedBack = 0;
      try {
        while ((await redis.lmove(processingList, keys.events, 'RIGHT', 'LEFT')) !== null) handedBack += 1;
      } finally {
        // Also when the hand-back failed (Redis gone): what stays in the processing list is
        // reclaimed once the heartbeat has expired, which a heartbeat left running would prevent.
        await stopHeartbeat();
        metricsStopped?.();
      }
      log.info('consumer stopped', { ...stats, handedBack });
    },
  };
}

/** How often a consumer without partitions checks that Redis is not partitioned meanwhile. */
const LAYOUT_CHECK_MS = 2000;

/** Logs (once per incident, at error) when Redis holds another number of partitions than this consumer's one. */
function watchLayout(redis: Redis, log: Logger): () => void {
  let said: string | undefined;
  const timer = setInterval(() => {
    checkPartitionLayout(partitionsOf(redis)).then(
      () => (said = undefined),
      (error: Error) => {
        if (!(error instanceof ConfigError) || said === error.message) return;
        said = error.message;
        log.error(error.message);
      },
    );
  }, LAYOUT_CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}
