import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import type { Db } from '../outbox/store/open-database.js';
import { keys } from '../outbox/redis/keys.js';

export interface StoreCounts {
  orders: number;
  outbox: number;
  /** Messages the relay ever pushed, duplicates included. */
  enqueued: number;
  /** Events applied once each (HLEN processed). */
  processedUnique: number;
}

export async function countStores(db: Db, redis: Redis): Promise<StoreCounts> {
  const count = (table: 'orders' | 'outbox') => db.prepare<[], { n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).get()!.n;
  const [enqueued, processedUnique] = await Promise.all([redis.get(keys.enqueued), redis.hlen(keys.processed)]);
  return { orders: count('orders'), outbox: count('outbox'), enqueued: Number(enqueued ?? 0), processedUnique };
}

/** The same counts with the orders and the outbox on PostgreSQL. */
export async function countPgStores(pool: Pool, redis: Redis): Promise<StoreCounts> {
  const { rows } = await pool.query<{ orders: string; outbox: string }>('SELECT (SELECT COUNT(*) FROM orders) AS orders, (SELECT COUNT(*) FROM outbox) AS outbox');
  const [enqueued, processedUnique] = await Promise.all([redis.get(keys.enqueued), redis.hlen(keys.processed)]);
  return { orders: Number(rows[0].orders), outbox: Number(rows[0].outbox), enqueued: Number(enqueued ?? 0), processedUnique };
}

/** The four lines of report.txt. */
export function formatReport(counts: StoreCounts): string[] {
  return [
    `orders=${counts.orders}`,
    `outbox=${counts.outbox}`,
    `enqueued=${counts.enqueued}`,
    `processed_unique=${counts.processedUnique}`,
  ];
}
