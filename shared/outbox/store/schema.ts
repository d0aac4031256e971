import type { Database } from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';

/**
 * The version of the library's tables, kept in `outbox_meta` (key `schema_version`): `user_version`
 * belongs to the user's database. Bumped whenever the library's tables change. The PostgreSQL
 * tables (postgres/pg-schema.ts) carry the same version: change both together.
 */
export const SCHEMA_VERSION = 5;

/** The library's tables, in whichever database the user appends in. */
export const LIBRARY_TABLES = ['outbox', 'outbox_pruned', 'outbox_meta', 'outbox_aggregates'] as const;

// `aggregate_id` is the aggregate key `<aggregateType>:<aggregateId>` (e.g. `order:42`).
// `outbox_aggregates.last_seq` is each aggregate's last event seq, assigned by `append` inside the
// caller's transaction; a row of its own (not MAX(seq) over outbox) keeps seq monotonic after
// `outbox prune` deleted old rows. `outbox.id` is AUTOINCREMENT so ids are never reused: it is the
// relay's insertion order. `prev_created_at` is the created_at of the aggregate's previous event (0
// for its first): the consumer tells a guard dropped after the aggregate horizon from a gap by it.
// `last_at` and `prev_at` carry it from one append to the next.
const LIBRARY_SCHEMA = `
CREATE TABLE IF NOT EXISTS outbox (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT    NOT NULL UNIQUE,
  aggregate_id TEXT    NOT NULL,
  seq          INTEGER NOT NULL CHECK (seq > 0),
  event_type   TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  status       TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PUBLISHED')),
  created_at   INTEGER NOT NULL,
  published_at INTEGER,
  prev_created_at INTEGER NOT NULL DEFAULT 0,
  UNIQUE (aggregate_id, seq)
);

CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(status) WHERE status = 'PENDING';

CREATE TABLE IF NOT EXISTS outbox_aggregates (
  aggregate_id TEXT    PRIMARY KEY,
  last_seq     INTEGER NOT NULL CHECK (last_seq > 0),
  last_at      INTEGER NOT NULL DEFAULT 0,
  prev_at      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- What outbox prune deleted, per aggregate: always a prefix of its events (seq 1..through_seq).
CREATE TABLE IF NOT EXISTS outbox_pruned (
  aggregate_id TEXT    PRIMARY KEY,
  through_seq  INTEGER NOT NULL,
  events       INTEGER NOT NULL
);

-- schema_version: the version of these tables. store_id: this database's identity; every message
-- carries it and Redis records the one it serves. replay_generation: bumped whenever PUBLISHED rows
-- are set back to PENDING (replay, repair, rebuild), so that a relay that read rows before that
-- does not mark them.
CREATE TABLE IF NOT EXISTS outbox_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
`;

/**
 * The library's schema version recorded in `db`; undefined when it has no `outbox_meta` table or no
 * version in it. A file that is not a database throws (SQLite's own error).
 */
export function schemaVersionOf(db: Database): string | undefined {
  if (!tableExists(db, 'outbox_meta')) return undefined;
  try {
    return db.prepare("SELECT value FROM outbox_meta WHERE key = 'schema_version'").pluck().get() as string | undefined;
  } catch {
    // An outbox_meta table of another shape: the schema probes name what is wrong.
    return undefined;
  }
}

function tableExists(db: Database, name: string): boolean {
  return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").pluck().get(name) === 1;
}

/**
 * Creates the library's tables in `db` when they are missing, next to whatever else it holds; its
 * other tables and its `user_version` are left alone. Idempotent, and safe when several processes
 * race (IMMEDIATE, or a savepoint inside the caller's transaction). Refuses a database whose outbox
 * tables are of another version, or that has a table with a library name that is not the library's.
 */
export function ensureOutboxTables(db: Database): void {
  db.transaction(() => {
    if (tableExists(db, 'outbox_meta')) {
      const version = upgradeInTransaction(db);
      if (version !== String(SCHEMA_VERSION)) {
        throw new StoreUnavailableError(
          `${db.name} holds outbox tables of another version (${version ?? 'before 4'}, expected ${SCHEMA_VERSION}): recreate them (for the lab: "outbox init --force")`,
        );
      }
      return;
    }
    const taken = LIBRARY_TABLES.filter((name) => tableExists(db, name));
    if (taken.length > 0) {
      throw new StoreUnavailableError(`${db.name} already has a table named ${taken.join(', ')} that is not the outbox's: rename it, or use another database`);
    }
    db.exec(LIBRARY_SCHEMA);
    const meta = db.prepare('INSERT INTO outbox_meta (key, value) VALUES (?, ?)');
    meta.run('schema_version', String(SCHEMA_VERSION));
    meta.run('store_id', newStoreId());
    meta.run('replay_generation', '0');
  }).immediate();
}

/**
 * Version 4 -> 5: the columns that carry each event's predecessor's commit time. Old rows get 0;
 * an aggregate's last_at is its last row's created_at, 0 when prune deleted it (so it was applied).
 */
const UPGRADE_FROM_4 = `
ALTER TABLE outbox ADD COLUMN prev_created_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_aggregates ADD COLUMN last_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_aggregates ADD COLUMN prev_at INTEGER NOT NULL DEFAULT 0;
UPDATE outbox_aggregates SET last_at = COALESCE(
  (SELECT created_at FROM outbox WHERE outbox.aggregate_id = outbox_aggregates.aggregate_id AND outbox.seq = last_seq), 0);
UPDATE outbox_meta SET value = '5' WHERE key = 'schema_version';
`;

/** Upgrades tables of an older version it knows, inside the caller's transaction; resolves the version then. */
function upgradeInTransaction(db: Database): string | undefined {
  const version = schemaVersionOf(db);
  if (version !== '4') return version;
  db.exec(UPGRADE_FROM_4);
  return String(SCHEMA_VERSION);
}

/** Upgrades the library's tables in `db` when they are of an older version it knows (IMMEDIATE). */
export function upgradeOutboxTables(db: Database): void {
  if (schemaVersionOf(db) === '4') db.transaction(() => upgradeInTransaction(db)).immediate();
}

/** 16 hex digits: unique enough to tell two databases apart, short enough to ride on every message. */
export function newStoreId(): string {
  return randomBytes(8).toString('hex');
}
