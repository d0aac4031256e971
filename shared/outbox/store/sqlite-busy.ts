/**
 * SQLite's code when `error` is a lock it could not get in time (`SQLITE_BUSY` and its extended
 * codes, e.g. `SQLITE_BUSY_SNAPSHOT`): another connection held app.db's lock past the busy timeout.
 * Undefined for any other error.
 */
export function sqliteBusyCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY') ? code : undefined;
}
