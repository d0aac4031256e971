import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { databasePath } from '../config.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import { SCHEMA_VERSION, schemaVersionOf, upgradeOutboxTables } from './schema.js';

export type Db = Database.Database;

/**
 * The size the WAL is cut back to when a checkpoint lets a writer start it over: 4 MB, about what
 * the automatic checkpoint (1000 pages) lets it reach. A WAL that grew past it while a reader held
 * its snapshot gives the space back at the next restart instead of keeping its high-water mark.
 */
export const WAL_SIZE_LIMIT = 4 * 1024 * 1024;

/** Applies the connection settings every connection needs (WAL, NORMAL sync, a busy timeout, the WAL's size limit). */
export function configure(db: Db): Db {
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT}`);
  return db;
}

/**
 * Every table and column the code reads, prepared (not run): a foreign file that happens to carry
 * outbox's schema version fails here, with one line, rather than on the first query with a stack.
 */
const SCHEMA_PROBES = [
  'SELECT id, event_id, aggregate_id, seq, event_type, payload, status, created_at, published_at FROM outbox',
  'SELECT aggregate_id, through_seq, events FROM outbox_pruned',
  'SELECT key, value FROM outbox_meta',
  'SELECT aggregate_id, last_seq FROM outbox_aggregates',
];
/** The seed lab's table, which `outbox init` makes next to the library's: the lab's producer and commands read it. */
const LAB_PROBES = ['SELECT id, sku, qty, status FROM orders'];

export interface OpenDatabaseOptions {
  /**
   * Require only the library's tables (the relay: it carries any service's events, e.g.
   * examples/payments). Default false: the lab's `orders` table is required too.
   */
  outboxOnly?: boolean;
  /** The path was given (`--db` / `OUTBOX_DB`), not `<dir>/app.db`: the messages say so. */
  given?: boolean;
}

/** Where the database was named: `<dir>/app.db` (the data dir) or `--db` / `OUTBOX_DB`. */
function fixFor(given: boolean): string {
  return given ? 'pass --db / OUTBOX_DB the path of a database made by createOutbox (or "outbox init")' : 'move it away and run "outbox init"';
}

function assertOutboxTables(db: Db, path: string, { outboxOnly = false, given = false }: OpenDatabaseOptions): void {
  for (const probe of SCHEMA_PROBES) {
    try {
      db.prepare(probe);
    } catch (error) {
      // Never "init --force" here: it would delete whatever this file is (a service's database, say).
      throw new StoreUnavailableError(`${path} is not an outbox database (${(error as Error).message}): ${fixFor(given)}`);
    }
  }
  if (outboxOnly) return;
  for (const probe of LAB_PROBES) {
    try {
      db.prepare(probe);
    } catch (error) {
      throw new StoreUnavailableError(
        `${path} has the outbox's tables but not the lab's orders (${(error as Error).message}): a service's own database; ` +
          'the lab\'s order commands need the lab\'s app.db: run "outbox init" with a data dir of its own (--dir / OUTBOX_DIR)',
      );
    }
  }
}

/**
 * Opens `<dir>/app.db`, which `outbox init` (or a service's `createOutbox`, with `outboxOnly`) must have created. A missing, foreign or corrupt file
 * is a `StoreUnavailableError` with the fix in its message; the file is never created or changed.
 */
export function openDatabase(dir: string, options: OpenDatabaseOptions = {}): Db {
  return openDatabaseFile(databasePath(dir), options);
}

/** `openDatabase` by the database's path (`--db` / `OUTBOX_DB`: a service's own database, say). */
export function openDatabaseFile(path: string, options: OpenDatabaseOptions = {}): Db {
  if (!existsSync(path)) {
    throw new StoreUnavailableError(
      options.given ? `no database at ${path} (--db / OUTBOX_DB): pass the path of your service's database` : `no database at ${path}: run "outbox init" first (or pass --dir / OUTBOX_DIR, or --db)`,
    );
  }
  let db: Db | undefined;
  try {
    db = new Database(path, { fileMustExist: true });
    // The library's version lives in outbox_meta; user_version is the user's (the lab leaves it 0).
    upgradeOutboxTables(db);
    const version = schemaVersionOf(db);
    if (version !== undefined && version !== String(SCHEMA_VERSION)) {
      throw new StoreUnavailableError(
        `${path} is not an outbox database of this version (outbox schema version ${version}, expected ${SCHEMA_VERSION}): open it with the outbox version that wrote it, or ${options.given ? 'pass another database' : 'move it away and run "outbox init"'}`,
      );
    }
    assertOutboxTables(db, path, options);
    if (version === undefined) {
      throw new StoreUnavailableError(`${path} is not an outbox database of this version (no outbox schema version): ${fixFor(options.given ?? false)}`);
    }
    return configure(db);
  } catch (error) {
    db?.close();
    if (error instanceof StoreUnavailableError) throw error;
    const reason = error instanceof Error ? error.message : String(error);
    throw new StoreUnavailableError(`cannot open ${path} (${reason}): ${fixFor(options.given ?? false)}`);
  }
}
