import type { Redis } from 'ioredis';
import type { ConsumerHeartbeat } from '../../outbox/consumer/heartbeats.js';
import type { Logger } from '../../outbox/logger.js';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import { sqliteStatusReads, storeStatusOf, type StoreStatus } from '../../operations/status.js';
import { healthTargetsOf, probeHealth, type AppHealth } from '../health/app-health.js';
import { heldRows, type HeldRow } from './held-actions.js';
import { History, type Rates, type Sample } from './history.js';
import { readRedisCounts, readStoreCounts, type RedisCounts, type StoreCounts } from './pipeline.js';
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
  /** app.db's store and whether Redis serves it; null while either cannot be read. */
  store: StoreStatus | null;
  /** Why numbers are missing (no app.db, Redis not connected), one sentence each. */
  problems: string[];
  pipeline: Partial<StoreCounts & Omit<RedisCounts, 'consumers' | 'meta'>>;
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
  database: DatabaseWatch;
  /** The connection, once there is one. */
  redis: () => Redis | undefined;
  log: Logger;
  env?: NodeJS.ProcessEnv;
}

const EVERY_MS = 1000;
/** A round of Redis reads that takes longer is given up (the sample shows what it has). */
const REDIS_TIMEOUT_MS = 800;

function timeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms)))]).finally(() =>
    clearTimeout(timer),
  );
}

/** `read()`, or undefined with the reason added to `problems` (a locked or damaged app.db is shown, not fatal). */
function attempt<T>(read: () => T, what: string, problems: string[]): T | undefined {
  try {
    return read();
  } catch (error) {
    problems.push(`${what}: ${(error as Error).message}`);
    return undefined;
  }
}

async function attemptAsync<T>(read: () => Promise<T>, what: string, problems: string[]): Promise<T | undefined> {
  try {
    return await read();
  } catch (error) {
    problems.push(`${what}: ${(error as Error).message}`);
    return undefined;
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
 * gets the last ten minutes for its lag chart. Each sample reads app.db (two indexed queries),
 * Redis (one round of LLEN / HLEN / HGETALL, no SCAN), the first 50 dead letters and parked
 * events, the apps' health endpoints and pm2's list. What cannot be read is missing from that
 * sample, with the reason.
 */
export function startSampler(options: SamplerOptions) {
  const { dir, namespace, database, log, env = process.env } = options;
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
    const live = database.check() ? database.current().db : undefined;
    if (live) store = attempt(() => readStoreCounts(live, at), 'cannot read app.db', problems);
    else problems.push(database.reason() ?? 'no app.db');
    const redis = options.redis();
    let counts: RedisCounts | undefined;
    let deadLetters: HeldRow[] = [];
    let parked: HeldRow[] = [];
    if (redis?.status === 'ready') {
      try {
        [counts, deadLetters, parked] = await timeout(Promise.all([readRedisCounts(redis), heldRows(redis, 'dead-letter'), heldRows(redis, 'parked')]), REDIS_TIMEOUT_MS, 'Redis');
      } catch (error) {
        problems.push(`cannot read Redis: ${(error as Error).message}`);
      }
    } else problems.push(`Redis is not connected${redis ? ` (${redis.status})` : ''}: its numbers are missing`);
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
    const { consumers = [], meta, ...redisNumbers } = counts ?? ({} as Partial<RedisCounts>);
    return {
      at,
      dir,
      namespace,
      store: (live && meta && (await attemptAsync(() => storeStatusOf(sqliteStatusReads(live), meta, namespace), 'cannot read the store id', problems))) || null,
      // No daemon is not a problem (the apps table says so); a daemon that does not answer is.
      problems: apps.running && apps.reason ? [...problems, apps.reason] : problems,
      pipeline: { ...store, ...redisNumbers },
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
