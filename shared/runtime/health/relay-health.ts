import type { Redis } from 'ioredis';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import { checkDatabase, checkRedis } from './checks.js';
import { failed, healthReport, type AppIdentity, type Check, type HealthReport } from './health-report.js';
import { keys } from '../../outbox/redis/keys.js';
import type { RelayStats } from '../../outbox/relay/relay-stats.js';

/**
 * No relay pass finished for this long (by any relay: one runs at a time), or one has been held up
 * by app.db refusing its writes for this long: the relay is not relaying. Passes end every 1.5 s.
 */
export const PASS_STALE_MS = 30_000;

/**
 * The relay app's health: Redis answers; app.db is live, an outbox store and takes writes; Redis
 * serves that store (or none yet: the next pass claims it); and relaying goes on: a pass (of any
 * relay, from `outbox:relay:last-run`) finished within 30 s, and none is held up longer by app.db.
 */
export async function relayHealth(identity: AppIdentity, database: DatabaseWatch | (() => Promise<Check>), redis: Redis, stats: RelayStats): Promise<HealthReport> {
  const redisCheck = await checkRedis(redis);
  // app.db, or the PostgreSQL store's own check (`checkPgStore`).
  const databaseCheck = typeof database === 'function' ? await database() : checkDatabase(database);
  const [servedStore, lastRunAt] = redisCheck.ok
    ? await Promise.all([redis.hget(keys.meta, 'store'), redis.hget(keys.relayLastRun, 'at')]).catch(() => [null, null])
    : [null, null];

  let store: Check;
  if (!redisCheck.ok || !databaseCheck.ok) store = { ok: true, checked: false };
  else if (servedStore === null) store = { ok: true, servedStore: null, note: 'Redis serves no store yet, or lost its state: the next pass claims or rebuilds it' };
  else if (servedStore !== databaseCheck.storeId) {
    store = failed(`Redis serves another store, ${servedStore}, than the database's ${String(databaseCheck.storeId)}: nothing is relayed (see "outbox status")`, { servedStore });
  } else store = { ok: true, servedStore };

  // Measured after the reads: a pass that ended while they were under way is not younger than 0.
  const now = Date.now();
  const own = stats.snapshot(now);
  const lastRunAgeMs = lastRunAt ? Math.max(0, now - Number(lastRunAt)) : null;
  const sinceStart = process.uptime() * 1000;
  let passes: Check = { ok: true, lastPassAgeMs: lastRunAgeMs, own };
  if (own.blocked && own.blocked.forMs > PASS_STALE_MS) {
    passes = failed(`the relay pass has been held up for ${Math.round(own.blocked.forMs / 1000)} s: ${own.blocked.cause}`, { lastPassAgeMs: lastRunAgeMs, own });
  } else if (redisCheck.ok && (lastRunAgeMs ?? sinceStart) > PASS_STALE_MS && sinceStart > PASS_STALE_MS) {
    const last = lastRunAgeMs === null ? 'none ever' : `the last ${Math.round(lastRunAgeMs / 1000)} s ago`;
    passes = failed(`no relay pass finished in ${PASS_STALE_MS / 1000} s (${last})`, { lastPassAgeMs: lastRunAgeMs, own });
  }
  return healthReport(identity, { redis: redisCheck, database: databaseCheck, store, passes });
}
