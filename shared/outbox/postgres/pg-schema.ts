import type { ClientBase, Pool } from 'pg';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import { LIBRARY_TABLES, newStoreId, SCHEMA_VERSION } from '../store/schema.js';
import { INIT_LOCK } from './locks.js';
import { pgUnavailable } from './pg-errors.js';

/** Anything that runs a query: a Pool, a PoolClient, a Client. */
export type Queryable = Pick<ClientBase, 'query'>;

// The SQLite schema (store/schema.ts), table for table and column for column, in the current
// schema of the connection (its search_path). Times are ms since epoch (bigint); payload is the JSON
// text append wrote, kept as text so the relay embeds it byte for byte, as SQLite's relay does. The
// pending index is on id, so the relay's ORDER BY id LIMIT n reads it in order, without a sort.
const PG_SCHEMA = `
CREATE TABLE outbox (
  id           bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id     text    NOT NULL UNIQUE,
  aggregate_id text    NOT NULL,
  seq          bigint  NOT NULL CHECK (seq > 0),
  event_type   text    NOT NULL,
  payload      text    NOT NULL,
  status       text    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PUBLISHED')),
  created_at   bigint  NOT NULL,
  published_at bigint,
  prev_created_at bigint NOT NULL DEFAULT 0,
  UNIQUE (aggregate_id, seq)
);
CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'PENDING';
CREATE TABLE outbox_aggregates (
  aggregate_id text   PRIMARY KEY,
  last_seq     bigint NOT NULL CHECK (last_seq > 0),
  last_at      bigint NOT NULL DEFAULT 0,
  prev_at      bigint NOT NULL DEFAULT 0
);
CREATE TABLE outbox_pruned (
  aggregate_id text   PRIMARY KEY,
  through_seq  bigint NOT NULL,
  events       bigint NOT NULL
);
CREATE TABLE outbox_meta (
  key   text PRIMARY KEY,
  value text NOT NULL
);
`;

/** Version 4 -> 5, as store/schema.ts's UPGRADE_FROM_4. */
const PG_UPGRADE_FROM_4 = `
ALTER TABLE outbox ADD COLUMN prev_created_at bigint NOT NULL DEFAULT 0;
ALTER TABLE outbox_aggregates ADD COLUMN last_at bigint NOT NULL DEFAULT 0, ADD COLUMN prev_at bigint NOT NULL DEFAULT 0;
UPDATE outbox_aggregates a SET last_at = COALESCE(
  (SELECT created_at FROM outbox o WHERE o.aggregate_id = a.aggregate_id AND o.seq = a.last_seq), 0);
UPDATE outbox_meta SET value = '5' WHERE key = 'schema_version';
`;

/** The library's tables that exist in the connection's current schema. */
async function existingTables(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ANY($1)',
    [LIBRARY_TABLES],
  );
  return rows.map((row) => row.name);
}

/** The schema version recorded in outbox_meta; undefined when there is no table or no version in it. */
export async function pgSchemaVersionOf(db: Queryable): Promise<string | undefined> {
  if (!(await existingTables(db)).includes('outbox_meta')) return undefined;
  try {
    const { rows } = await db.query<{ value: string }>("SELECT value FROM outbox_meta WHERE key = 'schema_version'");
    return rows[0]?.value;
  } catch {
    return undefined;
  }
}

/**
 * Creates (or checks) the library's tables inside the caller's open transaction on `client`:
 * committed or rolled back with the caller's own statements. `where` names the database in errors.
 */
export async function createOrCheck(client: ClientBase, where: string): Promise<void> {
  // Concurrent first starts: one creates, the others wait here and then find the tables.
  await client.query('SELECT pg_advisory_xact_lock($1)', [INIT_LOCK]);
  const existing = await existingTables(client);
  if (existing.includes('outbox_meta')) {
    let version = await pgSchemaVersionOf(client);
    if (version === '4') {
      await client.query(PG_UPGRADE_FROM_4);
      version = String(SCHEMA_VERSION);
    }
    if (version !== String(SCHEMA_VERSION)) {
      throw new StoreUnavailableError(`${where} holds outbox tables of another version (${version ?? 'none'}, expected ${SCHEMA_VERSION}): drop them, or use another database`);
    }
    return;
  }
  if (existing.length > 0) {
    throw new StoreUnavailableError(`${where} already has a table named ${existing.join(', ')} that is not the outbox's: rename it, or use another database or schema`);
  }
  await client.query(PG_SCHEMA);
  await client.query("INSERT INTO outbox_meta (key, value) VALUES ('schema_version', $1), ('store_id', $2), ('replay_generation', '0')", [String(SCHEMA_VERSION), newStoreId()]);
}

/**
 * Creates the library's tables in the pool's database (current schema) when they are missing, in
 * one transaction; idempotent, and safe when several processes start at once. Refuses tables of
 * another version, or a table with a library name that is not the library's. The user's tables are
 * left alone.
 */
export async function ensurePgOutboxTables(pool: Pool): Promise<void> {
  let client;
  try {
    client = await pool.connect();
  } catch (error) {
    throw pgUnavailable('create the outbox tables', error);
  }
  try {
    const { rows } = await client.query<{ db: string; schema: string }>('SELECT current_database() AS db, current_schema() AS schema');
    await client.query('BEGIN');
    await createOrCheck(client, `PostgreSQL database ${rows[0].db} (schema ${rows[0].schema})`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    if (error instanceof StoreUnavailableError) throw error;
    throw pgUnavailable('create the outbox tables', error);
  } finally {
    client.release();
  }
}
