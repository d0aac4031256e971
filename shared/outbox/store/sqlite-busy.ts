import type { Db } from './open-database.js';

/**
 * SQLite's code when `error` is a lock it could not get in time (`SQLITE_BUSY` and its extended
 * codes, e.g. `SQLITE_BUSY_SNAPSHOT`): another connection held app.db's lock past the busy timeout.
 * Undefined for any other error.
 */
export function sqliteBusyCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY') ? code : undefined;
}

/**
 * Runs `fn` with the connection's busy timeout (how long SQLite waits for a lock another connection
 * holds) set to `ms`, and sets back the one it had, also when `fn` throws.
 */
export function withBusyTimeout<T>(db: Db, ms: number, fn: () => T): T {
  const before = db.pragma('busy_timeout', { simple: true }) as number;
  db.pragma(`busy_timeout = ${ms}`);
  try {
    return fn();
  } finally {
    db.pragma(`busy_timeout = ${before}`);
  }
}
