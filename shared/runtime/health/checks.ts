import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Redis } from 'ioredis';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import { storeIdOf } from '../../outbox/store/store-meta.js';
import { sqliteBusyCode, withBusyTimeout } from '../../outbox/store/sqlite-busy.js';
import { explainError } from '../../outbox/errors/explain-error.js';
import { memoryProblem } from '../../outbox/redis/settings.js';
import { failed, type Check } from './health-report.js';
import type { Queryable } from '../../outbox/postgres/pg-schema.js';
import { pgReason } from '../../outbox/postgres/pg-errors.js';
import { pgStoreIdOf } from '../../outbox/postgres/pg-store-meta.js';

/** How long a health check waits for Redis's PONG, and for app.db's write lock (ms). */
export const REDIS_PING_TIMEOUT_MS = 1000;
export const WRITE_LOCK_WAIT_MS = 500;
/** Below this much free space on app.db's disk, app.db counts as not writable. */
export const MIN_FREE_BYTES = 1024 * 1024;

const messageOf = (error: unknown) => explainError(error)?.message ?? (error instanceof Error ? error.message : String(error));

/** Redis answers PING within `timeoutMs` on the app's own connection (not queued while it reconnects). */
export async function checkRedis(redis: Redis, timeoutMs = REDIS_PING_TIMEOUT_MS): Promise<Check> {
  if (redis.status !== 'ready') return failed(`Redis unreachable (connection ${redis.status})`, { connection: redis.status });
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      redis.ping(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no PONG within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    const pingMs = Number((performance.now() - started).toFixed(2));
    // An evicting policy set at run time, or a full Redis: answering, but not fit for outbox.
    const problem = await memoryProblem(redis);
    return problem ? failed(`Redis ${problem}`, { pingMs }) : { ok: true, pingMs };
  } catch (error) {
    return failed(`Redis unreachable (${messageOf(error)})`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * app.db is the live file at its path (not deleted or replaced), is an outbox store (its store id),
 * and takes writes: its write lock can be taken within `lockWaitMs` (BEGIN IMMEDIATE, rolled back:
 * nothing is written) and its disk has at least 1 MiB free. The wait blocks the event loop, as
 * every better-sqlite3 call does, so it is short.
 */
export function checkDatabase(database: DatabaseWatch, lockWaitMs = WRITE_LOCK_WAIT_MS): Check {
  if (!database.check()) return failed(database.reason() ?? 'no app.db');
  const live = database.current();
  const release = live.hold();
  try {
    const { db, path } = live;
    let storeId: string;
    try {
      storeId = storeIdOf(db);
    } catch (error) {
      return failed(messageOf(error), { path });
    }
    const freeBytes = freeBytesAt(path);
    if (freeBytes !== null && freeBytes < MIN_FREE_BYTES) return failed(`app.db's disk is full (${freeBytes} bytes free)`, { path, storeId, freeBytes });
    try {
      withBusyTimeout(db, lockWaitMs, () => {
        db.exec('BEGIN IMMEDIATE');
        db.exec('ROLLBACK');
      });
    } catch (error) {
      const busy = sqliteBusyCode(error);
      const reason = busy ? `app.db is locked by another writer for more than ${lockWaitMs} ms (${busy})` : `app.db refuses writes (${messageOf(error)})`;
      return failed(reason, { path, storeId, freeBytes });
    }
    return { ok: true, path, storeId, freeBytes };
  } finally {
    release();
  }
}

function freeBytesAt(path: string): number | null {
  try {
    const stats = statfsSync(dirname(path));
    return stats.bavail * stats.bsize;
  } catch {
    return null;
  }
}

/** The PostgreSQL store answers within `timeoutMs` with its store id (the relay's database check on PostgreSQL). */
export async function checkPgStore(pool: Queryable, timeoutMs = REDIS_PING_TIMEOUT_MS): Promise<Check> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const storeId = await Promise.race([
      pgStoreIdOf(pool),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    return { ok: true, storeId };
  } catch (error) {
    return failed(`PostgreSQL unusable (${error instanceof Error && (error as { code?: string }).code ? pgReason(error) : messageOf(error)})`);
  } finally {
    clearTimeout(timer);
  }
}
