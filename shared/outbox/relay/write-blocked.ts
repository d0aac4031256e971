import Database from 'better-sqlite3';
import { sqliteBusyCode } from '../store/sqlite-busy.js';

/**
 * Why app.db refused the relay a read or write it needs, as the line the relay logs once per
 * incident; undefined for any other error. Locked (SQLITE_BUSY: another writer held the write lock
 * longer than the relay's busy timeout) and full (no room for the WAL) are waited out, not crashes.
 */
export function writeBlockedCause(error: unknown): string | undefined {
  if (!(error instanceof Database.SqliteError)) return undefined;
  if (sqliteBusyCode(error)) return `app.db is locked by another writer (${error.code}): relay backing off`;
  if (error.code === 'SQLITE_FULL') return `app.db's disk is full (${error.code}): relay backing off`;
  if (error.code.startsWith('SQLITE_IOERR')) return `app.db's disk is full or failing (${error.code}): relay backing off`;
  return undefined;
}
