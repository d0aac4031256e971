import { within } from '../../outbox/sleep.js';
import type { ConsumerHeartbeat } from '../../outbox/consumer/heartbeats.js';
import type { Logger } from '../../outbox/logger.js';
import { checkPartitionLayout } from '../../outbox/redis/partition-layout.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { storeStatusOf, worstStore, type StatusStoreReads, type StoreStatus } from '../../operations/status.js';
import type { DashboardStore } from './dashboard-store.js';
import { healthTargetsOf, probeHealth, type AppHealth } from '../health/app-health.js';
import { heldRows, type HeldRow } from './held-actions.js';
import { History, type Rates, type Sample } from './history.js';
import { readRedisCounts, type PartitionCounts, type RedisCounts, type StoreCounts } from './pipeline.js';
import { pm2Apps, type Pm2App } from './pm2-apps.js';

/** One app as the page shows it: what pm2 says of it (when it runs under pm2) and what its health endpoint answered. */
export interface AppRow {
  name: string;
  pm2: Pm2App | null;
  health: Pick<AppHealth, 'state' | 'reason' | 'url'> | null;
}

/** What GET /api/state answers: the latest sample and what the page shows beside it. */
export interface DashboardState {
  at: number;
  dir: string;
  namespace: string;
  /** The store (app.db or PostgreSQL) and whether Redis serves it (with partitions: the worst partition's say); null while either cannot be read. */
  store: StoreStatus | null;
  /** Why numbers are missing (no app.db, Redis not connected), one sentence each. */
  problems: string[];
  /** With partitions, summed over them. */
  pipeline: Partial<StoreCounts & Omit<RedisCounts, 'consumers' | 'metas' | 'partitions'>>;
  /** With several partitions: each one's queue, in flight, applied, held and lease holder; absent with one. */
  partitions?: PartitionCounts[];
  rates: Rates;
  deadLetters: HeldRow[];
  parked: HeldRow[];
  apps: AppRow[];
  pm2: { home: string; running: boolean; reason?: string };
  consumers: ConsumerHeartbeat[];
  /** The samples after the `since` the page asked with, for the lag chart. */
  history: Sample[];
}

export interface SamplerOptions {
  dir: string;
  namespace: string;
  store: DashboardStore;
  /** The partitions' connections (one in all without partitions), once they are open. */
  queues: () => Partitions | undefined;
  log: Logger;
  env?: NodeJS.ProcessEnv;
}

const EVERY_MS = 1000;
/** A round of Redis reads that takes longer is given up (the sample shows what it has). */
const REDIS_TIMEOUT_MS = 800;

/** `read()`, or undefined with the line `problem` makes of its error added to `problems` (a locked or damaged app.db, PostgreSQL down: shown, not fatal). */
async function attempt<T>(read: () => Promise<T>, problem: (error: unknown) => string, problems: string[]): Promise<T | undefined> {
  try {
    return await read();
  } catch (error) {
    problems.push(problem(error));
    return undefined;
  }
}

/** What the store says of itself and what each partition's meta says of it, as the worst partition's (as `outbox status` does). */
async function storeStatus(reads: StatusStoreReads, metas: Record<string, string>[], namespace: string): Promise<StoreStatus> {
  return worstStore(await Promise.all(metas.map((meta) => storeStatusOf(reads, meta, namespace))));
}

/** Redis's partition layout against the configured number, as a problem line (a dashboard shows what it can all the same). */
async function layoutProblem(queues: Partitions): Promise<string | undefined> {
  try {
    await checkPartitionLayout(queues);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** pm2's apps and the apps' health answers, one row per app (pm2's list first, then apps only a health endpoint knows). */
function appRows(pm2: Pm2App[], health: AppHealth[]): AppRow[] {
  const rows: AppRow[] = pm2.map((p) => ({ name: p.name, pm2: p, health: null }));
  for (const h of health) {
    const row = rows.find((r) => r.name === h.app && r.health === null);
    const shown = { state: h.state, reason: h.reason, url: h.url };
    if (row) row.health = shown;
    else rows.push({ name: h.app, pm2: null, health: shown });
  }
  return rows;
}

/**
 * Samples the pipeline every second, whether a page looks or not, so that a page opened later
 * gets the last ten minutes for its lag chart. Each sample reads the store (app.db or PostgreSQL:
 * two indexed queries), each partition of Redis (one round of LLEN / HLEN / HGETALL, no SCAN, all
 * partitions at once), the first 50 dead letters and parked
 * events, the apps' health endpoints and pm2's list. What cannot be read is missing from that
 * sample, with the reason.
 */
export function startSampler(options: SamplerOptions) {
  const { dir, namespace, store: source, log, env = process.env } = options;
  const history = new History();
  const pm2 = pm2Apps(dir, env);
  let latest: Omit<DashboardState, 'history'> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failing: string | undefined;

  async function sample(): Promise<Omit<DashboardState, 'history'>> {
    const at = Date.now();
    const problems: string[] = [];
    let store: StoreCounts | undefined;
    const live = source.current();
    if (typeof live === 'string') problems.push(live);
    else store = await attempt(() => live.counts(at), (error) => source.problem('counts', error), problems);
    const queues = options.queues();
    let counts: RedisCounts | undefined;
    let deadLetters: HeldRow[] = [];
    let parked: HeldRow[] = [];
    const notReady = queues?.clients.find((client) => client.status !== 'ready');
    if (queues && !notReady) {
      try {
        let layout: string | undefined;
        [counts, deadLetters, parked, layout] = await within(
          Promise.all([readRedisCounts(queues), heldRows(queues, 'dead-letter'), heldRows(queues, 'parked'), layoutProblem(queues)]),
          REDIS_TIMEOUT_MS,
          'Redis',
        );
        if (layout) problems.push(layout);
      } catch (error) {
        problems.push(`cannot read Redis: ${(error as Error).message}`);
      }
    } else problems.push(`Redis is not connected${notReady ? ` (${notReady.status})` : ''}: its numbers are missing`);
    const [health, apps] = await Promise.all([Promise.all(healthTargetsOf(counts?.consumers ?? [], env).map((target) => probeHealth(target, { dir, namespace }))), pm2.list()]);
    history.add({
      t: at,
      pending: store?.pending ?? null,
      queued: counts?.queued ?? null,
      inFlight: counts?.inFlight ?? null,
      committed: store?.committed ?? null,
      enqueued: counts?.enqueued ?? null,
      applied: counts?.applied ?? null,
      relayLagMs: store ? (store.oldestPendingAgeMs ?? 0) : null,
      consumerLagMs: counts ? (counts.oldestQueuedAgeMs ?? 0) : null,
    });
    const { consumers = [], metas, partitions, ...redisNumbers } = counts ?? ({} as Partial<RedisCounts>);
    return {
      at,
      dir,
      namespace,
      store: (typeof live !== 'string' && metas && (await attempt(() => storeStatus(live.status, metas, namespace), (error) => source.problem('store id', error), problems))) || null,
      // No daemon is not a problem (the apps table says so); a daemon that does not answer is.
      problems: apps.running && apps.reason ? [...problems, apps.reason] : problems,
      pipeline: { ...store, ...redisNumbers },
      ...(partitions ? { partitions } : {}),
      rates: history.rates(),
      deadLetters,
      parked,
      apps: appRows(apps.apps, health),
      pm2: { home: apps.home, running: apps.running },
      consumers,
    };
  }

  const tick = async () => {
    const started = Date.now();
    try {
      latest = await sample();
      if (failing !== undefined) log.info('dashboard sampling works again');
      failing = undefined;
    } catch (error) {
      // Logged once per incident, not every second.
      if (failing === undefined) log.error('dashboard sample failed', { error });
      failing = (error as Error).message;
    }
    if (!stopped) timer = setTimeout(() => void tick(), Math.max(0, EVERY_MS - (Date.now() - started)));
  };
  const first = tick();

  return {
    /** The latest sample with the history after `since` (ms since epoch); waits for the first sample. */
    async state(since: number): Promise<DashboardState | undefined> {
      await first;
      return latest && { ...latest, history: history.since(since) };
    },
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      pm2.close();
    },
  };
}
