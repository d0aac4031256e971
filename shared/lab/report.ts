import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import type { Db } from '../outbox/store/open-database.js';
import { keys } from '../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../outbox/redis/partitions.js';

export interface StoreCounts {
  orders: number;
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
  return { orders: count('orders'), outbox: count('outbox'), ...(await countRedis(redis)) };
}

/** The same counts with the orders and the outbox on PostgreSQL. */
export async function countPgStores(pool: Pool, redis: Redis | Partitions): Promise<StoreCounts> {
  const { rows } = await pool.query<{ orders: string; outbox: string }>('SELECT (SELECT COUNT(*) FROM orders) AS orders, (SELECT COUNT(*) FROM outbox) AS outbox');
  return { orders: Number(rows[0].orders), outbox: Number(rows[0].outbox), ...(await countRedis(redis)) };
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
