import type { Pool, PoolClient } from 'pg';
import { ORDER_AGGREGATE } from '../orders/order-keys.js';

const KEY_PREFIX = `${ORDER_AGGREGATE}:`;

/** The seed lab's `orders` table is in this PostgreSQL database (what `outbox init --database` makes). */
export async function isLabPgDatabase(pool: Pool): Promise<boolean> {
  const { rows } = await pool.query<{ orders: string | null }>("SELECT to_regclass('orders')::text AS orders");
  return rows[0].orders !== null;
}

/**
 * What the lab's checks (verify-checks.ts) read in verify's snapshot, on PostgreSQL: the same three
 * figures as `readOrders` on SQLite, read with `client` inside verify's REPEATABLE READ transaction.
 */
export async function readOrdersOnPg(client: PoolClient): Promise<{ incomplete: number[]; orphans: string[]; reservedBySku: Map<string, number> }> {
  const incomplete = (
    await client.query<{ id: string }>(
      `SELECT o.id FROM orders o
         LEFT JOIN outbox_aggregates a ON a.aggregate_id = '${KEY_PREFIX}' || o.id
         LEFT JOIN outbox_pruned p ON p.aggregate_id = '${KEY_PREFIX}' || o.id
        WHERE a.last_seq IS NULL
           OR (SELECT COUNT(*) FROM outbox e WHERE e.aggregate_id = a.aggregate_id) + COALESCE(p.events, 0) <> a.last_seq
           OR (NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = a.aggregate_id AND e.seq = a.last_seq)
               AND COALESCE(p.through_seq, 0) < a.last_seq)
        ORDER BY o.id`,
    )
  ).rows.map((o) => Number(o.id));
  // The id is taken out of the key only when the key is one (CASE: never cast a key that is not), so the lookup uses orders' primary key.
  const orphans = (
    await client.query<{ event_id: string }>(
      `SELECT event_id FROM outbox e WHERE NOT EXISTS (
         SELECT 1 FROM orders o
          WHERE o.id = CASE WHEN e.aggregate_id ~ '^${KEY_PREFIX}[0-9]{1,18}$' THEN substr(e.aggregate_id, ${KEY_PREFIX.length + 1})::bigint END
            AND '${KEY_PREFIX}' || o.id = e.aggregate_id)`,
    )
  ).rows.map((e) => e.event_id);
  const reservedBySku = new Map(
    (await client.query<{ sku: string; qty: string }>("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku")).rows.map((row) => [row.sku, Number(row.qty)]),
  );
  return { incomplete, orphans, reservedBySku };
}
