import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import type { Db } from '../outbox/store/open-database.js';
import { keys } from '../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../outbox/redis/partitions.js';

export interface StoreCounts {
  /** The lab's orders; null on a database without its orders table (a service's own). */
  orders: number | null;
  outbox: number;
  /** Messages the relay ever pushed, duplicates included. */
  enqueued: number;
  /** Events applied once each (HLEN processed). */
  processedUnique: number;
}

/** Enqueued and processed, summed over the partitions. */
async function countRedis(redis: Redis | Partitions): Promise<Pick<StoreCounts, 'enqueued' | 'processedUnique'>> {
  const each = await Promise.all(partitionsOf(redis).clients.map((client) => Promise.all([client.get(keys.enqueued), client.hlen(keys.processed)])));
  return {
    enqueued: each.reduce((sum, [enqueued]) => sum + Number(enqueued ?? 0), 0),
    processedUnique: each.reduce((sum, [, processed]) => sum + processed, 0),
  };
}

export async function countStores(db: Db, redis: Redis | Partitions): Promise<StoreCounts> {
  const count = (table: 'orders' | 'outbox') => db.prepare<[], { n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).get()!.n;
  const hasOrders = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'orders'").get() !== undefined;
  return { orders: hasOrders ? count('orders') : null, outbox: count('outbox'), ...(await countRedis(redis)) };
}

/** The same counts with the orders and the outbox on PostgreSQL. */
export async function countPgStores(pool: Pool, redis: Redis | Partitions): Promise<StoreCounts> {
  const { rows: tables } = await pool.query<{ orders: string | null }>("SELECT to_regclass('orders')::text AS orders");
  const orders = tables[0].orders === null ? '' : '(SELECT COUNT(*) FROM orders) AS orders, ';
  const { rows } = await pool.query<{ orders?: string; outbox: string }>(`SELECT ${orders}(SELECT COUNT(*) FROM outbox) AS outbox`);
  return { orders: rows[0].orders === undefined ? null : Number(rows[0].orders), outbox: Number(rows[0].outbox), ...(await countRedis(redis)) };
}

/** The four lines of report.txt (three on a database without the lab's orders). */
export function formatReport(counts: StoreCounts): string[] {
  return [
    ...(counts.orders === null ? [] : [`orders=${counts.orders}`]),
    `outbox=${counts.outbox}`,
    `enqueued=${counts.enqueued}`,
    `processed_unique=${counts.processedUnique}`,
  ];
}
