import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { StoreUnavailableError } from '../../outbox/errors/store-unavailable-error.js';
import { redactUrl } from '../../outbox/config.js';
import { waitFor } from '../local/wait-for.js';
import { backendsCpuMs } from './cpu-time.js';

export interface BenchDatabase {
  /** outbox_bench_<pid>_<random>. */
  name: string;
  /** postgres://… of the bench's own database. */
  url: string;
  /** A new pool of `max` connections on it, all opened now (connecting is not measured); ended by the caller or by `drop`. */
  pool(max: number): Promise<pg.Pool>;
  /** CPU time the server processes of the database's sessions have used so far, ms (see backendsCpuMs). */
  cpuMs(): Promise<number>;
  /** Ends the pools still open and drops the database. */
  drop(): Promise<void>;
}

/**
 * A database of the bench's own on the server of `serverUrl`, `outbox_bench_<pid>_<random>`,
 * dropped by `drop`; no other database is touched.
 */
export async function createBenchDatabase(serverUrl: string): Promise<BenchDatabase> {
  const name = `outbox_bench_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: serverUrl, max: 1, connectionTimeoutMillis: 5000 });
  admin.on('error', () => {});
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } catch (error) {
    await admin.end();
    const reason = (error as Error).message || (error as { code?: string }).code || String(error);
    throw new StoreUnavailableError(`the scale-out stage cannot create its database on PostgreSQL at ${redactUrl(serverUrl)} (${reason}): start one there or pass --postgres <url of a server where it may create databases>`);
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const open = new Set<pg.Pool>();
  return {
    name,
    url: url.toString(),
    async pool(max) {
      // Never closed when idle: a session's CPU time is read from its server process while it lives.
      const pool = new pg.Pool({ connectionString: url.toString(), max, idleTimeoutMillis: 0 });
      pool.on('error', () => {});
      open.add(pool);
      const clients = await Promise.all(Array.from({ length: max }, () => pool.connect()));
      for (const client of clients) client.release();
      return pool;
    },
    cpuMs: () => backendsCpuMs(admin, name),
    async drop() {
      for (const pool of open) if (!pool.ended) await pool.end().catch(() => {});
      // pool.end() resolves before its sessions are gone: wait for them, FORCE only for a straggler.
      const gone = async () => (await admin.query('SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name])).rows[0].n === 0;
      await waitFor(gone, { timeoutMs: 5000 }).catch(() => {});
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}
