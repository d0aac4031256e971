import Database from 'better-sqlite3';
import type { Pool } from 'pg';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { configure, type Db } from '../outbox/store/open-database.js';
import type { ScratchOrders } from './dualwrite.js';

export const DUALWRITE_DB = 'dualwrite.db';
export const DUALWRITE_TABLE = 'dualwrite_orders';

/** The dual write's scratch store on SQLite: `<dir>/dualwrite.db`, deleted and created again by `reset`. */
export function sqliteScratchOrders(dir: string): ScratchOrders {
  const path = join(dir, DUALWRITE_DB);
  let db: Db | undefined;
  return {
    name: path,
    async reset() {
      for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
      db = configure(new Database(path));
      db.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL)');
    },
    async save(sku, qty) {
      return Number(db!.prepare<[string, number]>('INSERT INTO orders (sku, qty) VALUES (?, ?)').run(sku, qty).lastInsertRowid);
    },
    async count() {
      return db!.prepare<[], { n: number }>('SELECT COUNT(*) AS n FROM orders').get()!.n;
    },
    async close() {
      db?.close();
    },
  };
}

/** The dual write's scratch store on PostgreSQL: the table `dualwrite_orders` in the pool's database, dropped and created again by `reset`. */
export function pgScratchOrders(pool: Pool, name: string): ScratchOrders {
  return {
    name: `table ${DUALWRITE_TABLE} in ${name}`,
    async reset() {
      await pool.query(
        `DROP TABLE IF EXISTS ${DUALWRITE_TABLE}; CREATE TABLE ${DUALWRITE_TABLE} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, qty bigint NOT NULL)`,
      );
    },
    async save(sku, qty) {
      const { rows } = await pool.query<{ id: string }>(`INSERT INTO ${DUALWRITE_TABLE} (sku, qty) VALUES ($1, $2) RETURNING id`, [sku, qty]);
      return Number(rows[0].id);
    },
    async count() {
      return Number((await pool.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${DUALWRITE_TABLE}`)).rows[0].n);
    },
    async close() {},
  };
}
