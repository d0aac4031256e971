import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { configure, type Db } from '../../store/open-database.js';
import { ConflictError } from '../../errors/conflict-error.js';
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

/** What to do about a consumer database that is missing or has no inbox, named by `where`: one line's tail. */
export const createOrRebuild = (where: string) =>
  `the consumer never creates it on its own: the first time, create it with createConsumerDatabase (your setup step); ` +
  `if it was lost or replaced, stop the consumers and rebuild it from the store with "outbox verify --repair --consumer-db ${where}", then start them`;

/** Creates the inbox table if it is missing (idempotent), on a database the caller opened. */
export function ensureInbox(db: Db): Db {
  db.exec(INBOX_SCHEMA);
  return db;
}

/** Whether the database has the inbox table. */
export function hasInbox(db: Db): boolean {
  return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_inbox'").get() !== undefined;
}

/**
 * A connection the caller opened, refused (StoreUnavailableError, one line) when its database has
 * no inbox table: a file just created by `new Database(path)` where the consumer database was lost
 * would otherwise be taken for it, and every event Redis recorded applied would miss its effect.
 */
export function requireInbox(db: Db): Db {
  if (!hasInbox(db)) throw new StoreUnavailableError(`the consumer database ${db.name} has no inbox table (outbox_inbox): is it new, or a lost one recreated? ${createOrRebuild(db.name)}`);
  return db;
}

/**
 * Creates the consumer's own database the first time (the setup step of a database-mode consumer,
 * never the consumer itself): a new file at `path` (WAL, synchronous=NORMAL, a busy timeout) with
 * the inbox table, returned open; or, given a connection to a database of yours, adds the inbox
 * table to it. A file that exists, or a database that has the inbox already, is refused
 * (ConflictError): a lost one is rebuilt from the store with `outbox verify --repair --consumer-db`.
 */
export function createConsumerDatabase(target: string | Db): Db {
  if (typeof target !== 'string') {
    if (hasInbox(target)) throw new ConflictError(`${target.name} is a consumer database already (it has the inbox table): it is not created again`);
    return ensureInbox(target);
  }
  if (existsSync(target)) throw new ConflictError(`${target} exists: it is not created again (to rebuild a lost or replaced consumer database from the store: "outbox verify --repair --consumer-db ${target}")`);
  let db: Db | undefined;
  try {
    db = configure(new Database(target));
    return ensureInbox(db);
  } catch (error) {
    db?.close();
    throw new StoreUnavailableError(`cannot create the consumer database ${target} (${(error as Error).message}): check the path and its permissions`);
  }
}

/**
 * Opens the consumer's own SQLite file, which must exist with its inbox table (it is never created
 * here: see createConsumerDatabase): WAL, synchronous=NORMAL, a busy timeout. NORMAL keeps every
 * commit through a process crash (what the crash points prove); an OS crash or power loss may drop
 * the last commits after Redis recorded them processed, which only `synchronous = FULL` on this
 * connection rules out.
 */
export function openConsumerDatabase(path: string): Db {
  if (!existsSync(path)) throw new StoreUnavailableError(`no consumer database at ${path}: ${createOrRebuild(path)}`);
  let db: Db | undefined;
  try {
    db = configure(new Database(path, { fileMustExist: true }));
  } catch (error) {
    db?.close();
    throw new StoreUnavailableError(`cannot open the consumer database ${path} (${(error as Error).message}): check the path and its permissions`);
  }
  try {
    return requireInbox(db);
  } catch (error) {
    db.close();
    throw error;
  }
}

/** The event ids the inbox holds: the events whose effect this database has. */
export function inboxEventIds(db: Db): Set<string> {
  return new Set(db.prepare('SELECT event_id FROM outbox_inbox').pluck().all() as string[]);
}
