import { healthTargetsOf, probeHealth, type AppHealth } from '../runtime/health/app-health.js';
import type { StatusStoreReads, StoreSource } from './status.js';

/**
 * What `outbox status` shows when Redis cannot be read (down, unreachable, lost mid-read): the
 * store's side, which needs no Redis, each app's health, and the Redis error in one line. An
 * operator needs the pending count and the apps' health exactly then.
 */
export interface DegradedStatus {
  /** The one line that says why Redis could not be read. */
  redisError: string;
  store: { source: StoreSource; id: string; namespace: string };
  pending: number;
  /** Age of the oldest PENDING row in ms, null when none. */
  oldestPendingAgeMs: number | null;
  /** What each app's health endpoint answered; consumers on their default port (their heartbeats are in Redis). */
  apps: AppHealth[];
}

/** Reads the store and asks the apps; never touches Redis. */
export async function collectDegradedStatus(
  reads: StatusStoreReads,
  namespace: string,
  redisError: string,
  { probeApps = true, env = process.env }: { probeApps?: boolean; env?: NodeJS.ProcessEnv } = {},
): Promise<DegradedStatus> {
  const expected = { dir: reads.dir, namespace };
  const apps = probeApps ? Promise.all(healthTargetsOf([], env).map((target) => probeHealth(target, expected))) : Promise.resolve([]);
  const pending = await reads.pending();
  const readAt = Date.now();
  return {
    redisError,
    store: { source: reads.source, id: await reads.storeId(), namespace },
    pending: pending.n,
    oldestPendingAgeMs: pending.oldest === null ? null : Math.max(0, readAt - pending.oldest),
    apps: await apps,
  };
}

function age(ms: number | null): string {
  if (ms === null) return '-';
  return ms < 1000 ? `${ms} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;
}

function formatApp(a: AppHealth): string {
  const where = `${a.app} ${a.url.replace(/^http:\/\//, '')}`;
  if (a.state === 'ok') return `${where}: ok (pid ${a.report?.pid})`;
  if (a.state === 'unhealthy') return `${where}: WARN unhealthy (pid ${a.report?.pid}): ${a.reason}`;
  if (a.state === 'elsewhere') return `${where}: WARN ${a.reason}`;
  return `${where}: not running / no answer (${a.reason})`;
}

/** The screen: the store's lines as `formatStatus` writes them, then the apps, then the Redis error. */
export function formatDegradedStatus(s: DegradedStatus): string[] {
  const namespace = s.store.namespace === '' ? '' : ` in namespace ${s.store.namespace}`;
  return [
    `store       ${s.store.id}${namespace}: WARN Redis cannot be read, so the queue, the consumers and the relay's last job are not shown`,
    `outbox      pending ${s.pending}, oldest pending ${age(s.oldestPendingAgeMs)}`,
    ...s.apps.map((a, i) => `${i === 0 ? 'apps       ' : '           '} ${formatApp(a)}`),
    `redis       ERROR ${s.redisError}`,
  ];
}
