import type { Pool, PoolClient } from 'pg';
import type { Db } from '../../outbox/store/open-database.js';
import { defineVerifyChecks, invariantCheck, type VerifiedEvent } from '../../outbox/verify/verify-checks.js';
import { inventoryDelta } from '../orders/order-inventory.js';
import { INVENTORY_KEY, ORDER_AGGREGATE } from '../orders/order-keys.js';
import type { OrderEventBody } from '../orders/order-message.js';

const KEY_PREFIX = `${ORDER_AGGREGATE}:`;

/** The seed lab's `orders` table is in this database (what `outbox init` makes; a service's `createOutbox` does not). */
export function isLabDatabase(db: Db): boolean {
  try {
    db.prepare('SELECT id, sku, qty, status FROM orders');
    return true;
  } catch {
    return false;
  }
}

/** The seed lab's `orders` table is in this PostgreSQL database (what `outbox init --database` makes). */
export async function isLabPgDatabase(pool: Pool): Promise<boolean> {
  const { rows } = await pool.query<{ orders: string | null }>("SELECT to_regclass('orders')::text AS orders");
  return rows[0].orders !== null;
}

/** The SKU an event touches and by how much; a payload that is not an order's counts as no effect. */
function inventoryEffect(event: VerifiedEvent): { sku: string; delta: number } | undefined {
  const body = { type: event.type, payload: event.payload } as OrderEventBody;
  const sku = (event.payload as { sku?: unknown } | null)?.sku;
  if (typeof sku !== 'string') return undefined;
  return { sku, delta: inventoryDelta(body) ?? 0 };
}

/**
 * The orders whose events are not all there (the same SQL on both stores). An order's events are
 * those of its aggregate `order:<id>`, numbered 1..last_seq by append; events deleted by `outbox
 * prune` count as present: they were published long ago.
 */
const INCOMPLETE_ORDERS = `SELECT o.id FROM orders o
         LEFT JOIN outbox_aggregates a ON a.aggregate_id = '${KEY_PREFIX}' || o.id
         LEFT JOIN outbox_pruned p ON p.aggregate_id = '${KEY_PREFIX}' || o.id
        WHERE a.last_seq IS NULL
           OR (SELECT COUNT(*) FROM outbox e WHERE e.aggregate_id = a.aggregate_id) + COALESCE(p.events, 0) <> a.last_seq
           OR (NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = a.aggregate_id AND e.seq = a.last_seq)
               AND COALESCE(p.through_seq, 0) < a.last_seq)`;

/** What the lab's checks read in verify's snapshot transaction on app.db. */
function readOrders(db: Db) {
  const incomplete = db
    .prepare<[], { id: number }>(
      INCOMPLETE_ORDERS,
    )
    .all()
    .map((o) => o.id);
  const orphans = db
    .prepare<[], { event_id: string }>(
      // The id is cast out of the key so that the lookup uses orders' primary key; the key must also match exactly.
      `SELECT event_id FROM outbox e WHERE NOT EXISTS (
         SELECT 1 FROM orders o WHERE o.id = CAST(substr(e.aggregate_id, ${KEY_PREFIX.length + 1}) AS INTEGER) AND '${KEY_PREFIX}' || o.id = e.aggregate_id)`,
    )
    .all()
    .map((e) => e.event_id);
  const reservedBySku = new Map(
    db
      .prepare<[], { sku: string; qty: number }>("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku")
      .all()
      .map((row) => [row.sku, row.qty]),
  );
  return { incomplete, orphans, reservedBySku };
}

/**
 * What the lab's checks read in verify's snapshot on PostgreSQL: the same three
 * figures as `readOrders` on SQLite, read with `client` inside verify's REPEATABLE READ transaction.
 */
export async function readOrdersOnPg(client: PoolClient): Promise<{ incomplete: number[]; orphans: string[]; reservedBySku: Map<string, number> }> {
  const incomplete = (
    await client.query<{ id: string }>(
      `${INCOMPLETE_ORDERS} ORDER BY o.id`,
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

export const INVENTORY_CHECK = 'SKUs whose reserved qty != live orders';

/**
 * The seed lab's invariants, a check set like any user's: every order has all its events, no
 * event without an order, and the Redis inventory (the lab's handler's effect) = the live orders'
 * quantities. `outbox verify` runs it when the database has the lab's `orders` table and no
 * `--checks` is given. The inventory is exact under traffic: the orders are read in verify's
 * snapshot and the inventory in its MULTI, corrected by the events applied in between.
 */
export const labVerifyChecks = defineVerifyChecks({
  name: 'orders lab',
  snapshot: { producer: readOrders, postgres: readOrdersOnPg, counterHashes: [INVENTORY_KEY] },
  checks: {
    'orders with missing events': ({ snapshot }) => invariantCheck('orders with missing events', 0, snapshot.incomplete.length, snapshot.incomplete.map((id) => `order ${id}`)),
    'events without an order': ({ snapshot }) => invariantCheck('events without an order', 0, snapshot.orphans.length, snapshot.orphans),
    [INVENTORY_CHECK]: ({ snapshot, consumer, counters, pastHorizon, appliedPastHorizon }) => {
      // Database mode writes no inventory in Redis: comparing it with the orders would fail every SKU.
      if (consumer !== undefined) return { name: INVENTORY_CHECK, expected: '-', actual: 'not run: database mode, no effect in Redis', status: 'info' };
      // The orders of the snapshot, less the events it holds beyond the horizon, plus those applied by the MULTI.
      const expected = new Map(snapshot.reservedBySku);
      const add = (event: VerifiedEvent, sign: number) => {
        const effect = inventoryEffect(event);
        if (effect) expected.set(effect.sku, (expected.get(effect.sku) ?? 0) + sign * effect.delta);
      };
      for (const e of pastHorizon) add(e, -1);
      for (const e of appliedPastHorizon) add(e, 1);
      const inventory = counters[INVENTORY_KEY];
      const skus = new Set([...expected.keys(), ...Object.keys(inventory)]);
      const mismatches = [...skus]
        .filter((sku) => Number(inventory[sku] ?? 0) !== (expected.get(sku) ?? 0))
        .map((sku) => `${sku}: reserved ${inventory[sku] ?? 0}, orders say ${expected.get(sku) ?? 0}`);
      return invariantCheck(INVENTORY_CHECK, 0, mismatches.length, mismatches);
    },
  },
});
