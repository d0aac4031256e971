import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before } from 'node:test';
import pg from 'pg';
import { waitFor } from '../../shared/tooling/local/wait-for.js';
import { runCli, type CliEnv, type CliResult } from './cli.js';

/** The server the PostgreSQL tests use: 127.0.0.1:5432, user postgres, trust auth (OUTBOX_TEST_PG_URL overrides). */
export const PG_SERVER_URL = process.env.OUTBOX_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  /** postgres://… of this file's own database. */
  url: string;
  name: string;
  /** A new pool on it (ended after the file); `max` connections. */
  pool(max?: number): pg.Pool;
  /** Drops the library's tables and the test's `ledger`, and recreates `ledger`: a fresh store. */
  reset(): Promise<void>;
  /** One value of a query on a pool of its own. */
  scalar<T = unknown>(sql: string, values?: unknown[]): Promise<T>;
}

function urlOf(database: string): string {
  const url = new URL(PG_SERVER_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

/**
 * A database of this test file's own, `outbox_test_<pid>_<random>`, created before its tests and
 * dropped after them; no other database is touched. When PostgreSQL cannot be reached, the file's
 * tests fail with one line saying so (they are never skipped).
 */
export function usePostgres(): TestDatabase {
  const name = `outbox_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const pools: pg.Pool[] = [];
  let admin: pg.Pool | undefined;
  const db: TestDatabase = {
    url: urlOf(name),
    name,
    pool(max = 10) {
      const pool = new pg.Pool({ connectionString: db.url, max });
      // An idle connection PostgreSQL ends (a test's server restart, the drop at the end) is the pool's business.
      pool.on('error', () => {});
      pools.push(pool);
      return pool;
    },
    async reset() {
      await db.scalar('DROP TABLE IF EXISTS outbox, outbox_aggregates, outbox_pruned, outbox_meta, ledger');
      await db.scalar('CREATE TABLE ledger (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL)');
    },
    async scalar<T>(sql: string, values: unknown[] = []) {
      const { rows } = await own.query(sql, values);
      return (rows[0] ? Object.values(rows[0])[0] : undefined) as T;
    },
  };
  let own: pg.Pool;

  before(async () => {
    admin = new pg.Pool({ connectionString: PG_SERVER_URL, max: 1, connectionTimeoutMillis: 5000 });
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } catch (error) {
      await admin.end();
      admin = undefined;
      const reason = (error as Error).message || (error as { code?: string }).code || String(error);
      throw new Error(`PostgreSQL is not reachable at ${PG_SERVER_URL} (${reason}): start one there (user postgres, trust auth) or set OUTBOX_TEST_PG_URL`);
    }
    own = db.pool(2);
  });
  after(async () => {
    for (const pool of pools) await pool.end().catch(() => {});
    if (!admin) return;
    // pool.end() resolves before its sessions are gone: wait for them, so that the drop ends none
    // (FORCE only for a session a killed process left behind).
    const sessions = async () => (await admin!.query('SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name])).rows[0].n === 0;
    await waitFor(sessions, { timeoutMs: 5000 }).catch(() => {});
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  });
  return db;
}

/**
 * The CLI's environment on the PostgreSQL store `db` (OUTBOX_DATABASE_URL, plus `env`) with the
 * harness's data dir and Redis: what `pgCommands` runs the commands with, and what a test's steps in
 * its own process (helpers/orders.ts) take.
 */
export function pgCliEnv(db: TestDatabase, harness: { env: CliEnv }, env: Record<string, string> = {}): CliEnv {
  return { ...harness.env, env: { OUTBOX_DATABASE_URL: db.url, ...env } };
}

/**
 * `outbox <args>` on `db` with the harness's data dir and Redis (`pgCli`), the same asserting exit 0
 * (`ok`), and `refused`: exit `code` with one line on stderr matching `pattern`.
 */
export function pgCommands(db: TestDatabase, harness: { env: CliEnv }) {
  const pgCli = (args: string[], env: Record<string, string> = {}) => runCli(args, pgCliEnv(db, harness, env));
  return {
    pgCli,
    async ok(...args: string[]): Promise<CliResult> {
      const result = await pgCli(args);
      assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
      return result;
    },
    refused(result: CliResult, code: number, pattern: RegExp): void {
      assert.equal(result.code, code, result.stdout + result.stderr);
      assert.match(result.stderr.trimEnd(), pattern);
      assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
    },
  };
}
