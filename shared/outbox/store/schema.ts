import type { Database } from 'better-sqlite3';
import { randomBytes } from 'node:crypto';

/** Bumped whenever the tables change; `openDatabase` refuses a file with another version. */
export const SCHEMA_VERSION = 3;

// `orders.version` is the aggregate's last event seq. Keeping it on the aggregate row (not MAX(seq)
// over outbox) means seq stays monotonic even after old outbox rows are pruned.
// `outbox.id` is AUTOINCREMENT so ids are never reused: it is the relay's insertion order.
const SCHEMA = `
CREATE TABLE orders (
  id      INTEGER PRIMARY KEY,
  sku     TEXT    NOT NULL CHECK (length(sku) > 0),
  qty     INTEGER NOT NULL CHECK (qty > 0),
  status  TEXT    NOT NULL DEFAULT 'PLACED' CHECK (status IN ('PLACED', 'CANCELLED')),
  version INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE outbox (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT    NOT NULL UNIQUE,
  aggregate_id INTEGER NOT NULL,
  seq          INTEGER NOT NULL CHECK (seq > 0),
  event_type   TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  status       TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PUBLISHED')),
  created_at   INTEGER NOT NULL,
  published_at INTEGER,
  UNIQUE (aggregate_id, seq)
);

CREATE INDEX outbox_pending ON outbox(status) WHERE status = 'PENDING';

-- What outbox prune deleted, per aggregate: always a prefix of its events (seq 1..through_seq).
CREATE TABLE outbox_pruned (
  aggregate_id INTEGER PRIMARY KEY,
  through_seq  INTEGER NOT NULL,
  events       INTEGER NOT NULL
);

-- store_id: this database's identity, made by init; every message carries it and Redis records the
-- one it serves. replay_generation: bumped whenever PUBLISHED rows are set back to PENDING (replay,
-- repair, rebuild), so that a relay that read rows before that does not mark them.
CREATE TABLE outbox_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
`;

/**
 * Creates the tables in an empty database; leaves any other database alone. Safe when several
 * processes race on a new file: the IMMEDIATE transaction serializes them and only the first
 * finds it empty.
 */
export function createSchema(db: Database): void {
  db.transaction(() => {
    const empty = db.prepare('SELECT COUNT(*) AS n FROM sqlite_master').get() as { n: number };
    if (db.pragma('user_version', { simple: true }) !== 0 || empty.n > 0) return;
    db.exec(SCHEMA);
    const meta = db.prepare('INSERT INTO outbox_meta (key, value) VALUES (?, ?)');
    meta.run('store_id', newStoreId());
    meta.run('replay_generation', '0');
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

/** 16 hex digits: unique enough to tell two databases apart, short enough to ride on every message. */
export function newStoreId(): string {
  return randomBytes(8).toString('hex');
}
