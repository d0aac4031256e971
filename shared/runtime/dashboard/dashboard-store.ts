import type { Pool } from 'pg';
import { pgReason } from '../../outbox/postgres/pg-errors.js';
import type { DatabaseWatch } from '../../outbox/store/live-database.js';
import { pgStatusReads, sqliteStatusReads, type StatusStoreReads } from '../../operations/status.js';
import { readStoreCounts, type StoreCounts } from './pipeline.js';

/** What the dashboard reads of the outbox store, whichever it is (app.db, or PostgreSQL). */
export interface DashboardStore {
  /** Its reads now, or why there are none (one sentence: no app.db yet, a damaged one). */
  current(): StoreReads | string;
  /** A read's error as the line the page shows. */
  problem(what: 'counts' | 'store id', error: unknown): string;
  close(): Promise<void>;
}

export interface StoreReads {
  counts(now: number): Promise<StoreCounts>;
  status: StatusStoreReads;
}

/** app.db, followed when replaced (see `watchDatabase`). */
export function sqliteStore(database: DatabaseWatch): DashboardStore {
  return {
    current() {
      if (!database.check()) return database.reason() ?? 'no app.db';
      const { db } = database.current();
      return { counts: async (now) => readStoreCounts(db, now), status: sqliteStatusReads(db) };
    },
    problem: (what, error) => `${what === 'counts' ? 'cannot read app.db' : 'cannot read the store id'}: ${(error as Error).message}`,
    async close() {
      database.close();
    },
  };
}

/** The same numbers as `readStoreCounts`, in PostgreSQL: one statement, so one snapshot. */
export async function readPgStoreCounts(pool: Pick<Pool, 'query'>, now: number): Promise<StoreCounts> {
  const { rows } = await pool.query<{ n: string; oldest: string | null; committed: string | null }>(
    "SELECT (SELECT COUNT(*) FROM outbox WHERE status = 'PENDING') AS n, (SELECT MIN(created_at) FROM outbox WHERE status = 'PENDING') AS oldest, (SELECT MAX(id) FROM outbox) AS committed",
  );
  const { n, oldest, committed } = rows[0];
  return { pending: Number(n), oldestPendingAgeMs: oldest === null ? null : Math.max(0, now - Number(oldest)), committed: Number(committed ?? 0) };
}

/**
 * The PostgreSQL store of `url`, on a pool of its own (2 connections). No query is made here: a
 * server that is down, or a database without the outbox tables, is a problem line of each sample.
 */
export async function pgStore(url: string, dir: string): Promise<DashboardStore> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: url, max: 2, application_name: 'outbox-dashboard', connectionTimeoutMillis: 2000, query_timeout: 2000 });
  // An idle connection the server ends (a restart) is replaced on the next query; the next sample reports it.
  pool.on('error', () => {});
  const reads: StoreReads = { counts: (now) => readPgStoreCounts(pool, now), status: pgStatusReads(pool, dir) };
  return {
    current: () => reads,
    problem: (what, error) => `cannot read the PostgreSQL store${what === 'store id' ? "'s id" : ''}: ${pgReason(error)}`,
    close: () => pool.end(),
  };
}
