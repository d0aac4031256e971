import Database from 'better-sqlite3';
import { configure, type Db } from '../../store/open-database.js';
import { StoreUnavailableError } from '../../errors/store-unavailable-error.js';

/**
 * The inbox: one row per event whose effect this database holds, written in the same transaction
 * as the effect. Its primary key is what makes the effect happen once, whatever Redis remembers.
 */
const INBOX_SCHEMA = `
CREATE TABLE IF NOT EXISTS outbox_inbox (
  event_id TEXT PRIMARY KEY,
  aggregate_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  applied_at INTEGER NOT NULL
)`;

/** Creates the inbox table if it is missing (idempotent), on a database the caller opened. */
export function ensureInbox(db: Db): Db {
  db.exec(INBOX_SCHEMA);
  return db;
}

/**
 * Opens (creating it if missing) the consumer's own SQLite file: WAL, synchronous=NORMAL, a busy
 * timeout, and the inbox table. NORMAL keeps every commit through a process crash (what the crash
 * points prove); an OS crash or power loss may drop the last commits after Redis recorded them
 * processed, which only `synchronous = FULL` on this connection rules out.
 */
export function openConsumerDatabase(path: string): Db {
  let db: Db | undefined;
  try {
    db = configure(new Database(path));
    return ensureInbox(db);
  } catch (error) {
    db?.close();
    throw new StoreUnavailableError(`cannot open the consumer database ${path} (${(error as Error).message}): check the path and its permissions`);
  }
}

/** The event ids the inbox holds: the events whose effect this database has. */
export function inboxEventIds(db: Db): Set<string> {
  return new Set(db.prepare('SELECT event_id FROM outbox_inbox').pluck().all() as string[]);
}
