import type { Pool } from 'pg';
import { redactUrl } from '../outbox/config.js';
import { StoreUnavailableError } from '../outbox/errors/store-unavailable-error.js';
import { pgReason } from '../outbox/postgres/pg-errors.js';
import { ensurePgOutboxTables, pgSchemaVersionOf } from '../outbox/postgres/pg-schema.js';
import { pgStoreName } from '../outbox/postgres/pg-store-meta.js';
import { SCHEMA_VERSION } from '../outbox/store/schema.js';

// The PostgreSQL store of the CLI and the apps (OUTBOX_DATABASE_URL / --database). pg is loaded
// here, when a command or app opens the store, never by a module that only defines options.

export interface OpenPgOptions {
  /** Connections in the pool. Default 4. */
  max?: number;
  /** `application_name` of its sessions, shown in pg_stat_activity. Default 'outbox'. */
  name?: string;
  /** How long a connection attempt may take, ms. Default 5000. */
  connectTimeoutMs?: number;
}

/**
 * A pool on `url`, checked with one query: a server that cannot be reached or refuses the login is
 * a StoreUnavailableError (exit 5) in one line, the password never shown.
 */
export async function openPg(url: string, { max = 4, name = 'outbox', connectTimeoutMs = 5000 }: OpenPgOptions = {}): Promise<Pool> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: url, max, application_name: name, connectionTimeoutMillis: connectTimeoutMs });
  // An idle connection the server ends (a restart) is replaced on the next query; the next query reports it.
  pool.on('error', () => {});
  // So is one checked out when its session ends: its query fails (a 503), and the 'error' event the
  // client emits then, unheard, would be an uncaught exception that ends the app.
  pool.on('connect', (client) => client.on('error', () => {}));
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end().catch(() => {});
    throw new StoreUnavailableError(
      `cannot connect to PostgreSQL at ${redactUrl(url)} (${pgReason(error)}): start it, or point --database / OUTBOX_DATABASE_URL at a running server`,
    );
  }
  return pool;
}

/**
 * Refuses a database without the outbox tables (run `outbox init`) or with tables of another
 * schema version, in one line (exit 5), as a missing or foreign app.db is refused.
 */
export async function assertPgOutbox(pool: Pool): Promise<void> {
  let version: string | undefined;
  try {
    version = await pgSchemaVersionOf(pool);
    // Tables of the version before: upgraded in place (ensurePgOutboxTables adds the new columns).
    if (version === '4') {
      await ensurePgOutboxTables(pool);
      version = await pgSchemaVersionOf(pool);
    }
  } catch (error) {
    throw new StoreUnavailableError(`cannot read the outbox tables in PostgreSQL: ${pgReason(error)}`);
  }
  if (version === undefined) {
    throw new StoreUnavailableError(`${await pgStoreName(pool)} has no outbox tables: run "outbox init" with the same --database / OUTBOX_DATABASE_URL first`);
  }
  if (version !== String(SCHEMA_VERSION)) {
    throw new StoreUnavailableError(`${await pgStoreName(pool)} holds outbox tables of another version (${version}, expected ${SCHEMA_VERSION}): drop them, or use another database`);
  }
}
