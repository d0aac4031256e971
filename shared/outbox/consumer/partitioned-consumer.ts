import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import type { Partitions } from '../redis/partitions.js';
import { emptyStats } from './consumer.js';
import { sumCounters } from '../stats-interval.js';
import type { ConsumerCounters, ConsumerStats } from './consumer-stats.js';
import { startPartitionLeases, type PartitionRun } from './partition-leases.js';

/** What `startConsumer` returns, as the partitioned consumer uses it. */
interface Started extends PartitionRun {
  stats: ConsumerCounters;
  consumerStats: ConsumerStats;
}

/**
 * The consumer of several partitions: holds the leases of its share of them (partition-leases.ts)
 * and runs one `startConsumer` per partition it holds, each on that partition's connection. Its
 * numbers are the sum over the partitions it consumed (a released partition's stay counted), its lag
 * and ages the worst of them; while it holds none (a consumer on standby) its loop is the leases'.
 */
export function startPartitionedConsumer(
  partitions: Partitions,
  options: { consumerId: string; leaseMs?: number; log: Logger; startOne: (index: number, redis: Redis, heldUntil: () => number) => Started },
) {
  const runs = new Map<number, Started>();
  const finished: ConsumerCounters[] = [];
  const leases = startPartitionLeases(partitions, {
    consumerId: options.consumerId,
    leaseMs: options.leaseMs,
    log: options.log,
    start(index, heldUntil) {
      const run = options.startOne(index, partitions.clients[index], heldUntil);
      runs.set(index, run);
      return {
        async stop() {
          await run.stop();
          runs.delete(index);
          finished.push({ ...run.stats });
        },
      };
    },
    onChange: (held) => options.log.info('partitions held', { partitions: held }),
  });
  const counters = (): ConsumerCounters => sumCounters({ ...emptyStats(), errors: 0 }, [...finished, ...[...runs.values()].map((run) => run.stats)]);

  /** The health endpoint's view: the same shape as one consumer's ConsumerStats snapshot. */
  const consumerStats = {
    snapshot(now = Date.now()) {
      const snaps = [...runs.values()].map((run) => run.consumerStats.snapshot(now));
      const worst = (pick: (s: (typeof snaps)[number]) => number | null, idle: number | null) =>
        snaps.length === 0 ? idle : snaps.reduce<number | null>((max, s) => (pick(s) === null ? max : Math.max(max ?? 0, pick(s)!)), null);
      return {
        ...counters(),
        lagMs: worst((s) => s.lagMs, 0) ?? 0,
        lastTakeAgeMs: worst((s) => s.lastTakeAgeMs, leases.sinceTickMs()),
        heartbeatAgeMs: worst((s) => s.heartbeatAgeMs, leases.sinceTickMs()),
        refusedWaiting: snaps.reduce((sum, s) => sum + s.refusedWaiting, 0),
        refusedProblem: snaps.find((s) => s.refusedWaiting > 0)?.refusedProblem ?? '',
      };
    },
  } satisfies Pick<ConsumerStats, 'snapshot'>;

  return {
    get stats(): ConsumerCounters {
      return counters();
    },
    consumerStats,
    /** The partitions held now. */
    held: leases.held,
    stop: () => leases.stop(),
  };
}
