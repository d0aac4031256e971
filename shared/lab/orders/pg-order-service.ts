import type { Pool, PoolClient } from 'pg';
import { crashPoint } from '../../outbox/crash-point.js';
import { ConflictError } from '../../outbox/errors/conflict-error.js';
import { NotFoundError } from '../../outbox/errors/not-found-error.js';
import type { EventTypeOf, PayloadInputOf } from '../../outbox/events/define-events.js';
import { createPgOutbox } from '../../outbox/postgres/pg-outbox.js';
import { createOrCheck, ensurePgOutboxTables } from '../../outbox/postgres/pg-schema.js';
import { orderEvents, ORDER_AGGREGATE, type OrderEvents } from './order-events.js';
import type { NewOrder, Order, OrderWrite } from './order-service.js';

type EventType = EventTypeOf<OrderEvents>;

// The lab's own table on PostgreSQL, as orders-schema.ts has it on SQLite.
const PG_ORDERS = `
CREATE TABLE IF NOT EXISTS orders (
  id      bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sku     text    NOT NULL CHECK (length(sku) > 0),
  qty     bigint  NOT NULL CHECK (qty > 0),
  status  text    NOT NULL DEFAULT 'PLACED' CHECK (status IN ('PLACED', 'CANCELLED'))
)`;

/** The lab's tables on PostgreSQL (orders, then the library's), when missing; idempotent. */
export async function createPgLabSchema(pool: Pool): Promise<void> {
  await pool.query(PG_ORDERS);
  await ensurePgOutboxTables(pool);
}

/**
 * Drops the lab's tables and the library's and creates them again, empty, with a new store id
 * (`init --force`): one transaction, so a failure leaves the old ones as they were.
 */
export async function recreatePgLabSchema(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ db: string; schema: string }>('SELECT current_database() AS db, current_schema() AS schema');
    await client.query('BEGIN');
    await client.query('DROP TABLE IF EXISTS orders, outbox, outbox_aggregates, outbox_pruned, outbox_meta');
    await client.query(PG_ORDERS);
    await createOrCheck(client, `PostgreSQL database ${rows[0].db} (schema ${rows[0].schema})`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** Rows of the lab's tables (what `init --force` deletes); null when the database has none of them. */
export async function pgLabRows(pool: Pool): Promise<{ orders: number; outbox: number; outbox_pruned: number } | null> {
  const { rows } = await pool.query<{ name: string }>(
    "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN ('orders', 'outbox', 'outbox_pruned')",
  );
  if (rows.length === 0) return null;
  const present = new Set(rows.map((row) => row.name));
  const count = async (table: string) => (present.has(table) ? Number((await pool.query(`SELECT COUNT(*) AS n FROM ${table}`)).rows[0].n) : 0);
  return { orders: await count('orders'), outbox: await count('outbox'), outbox_pruned: await count('outbox_pruned') };
}

interface OrderRow {
  id: string;
  sku: string;
  qty: string;
  status: Order['status'];
  version: string;
}

const toOrder = (row: OrderRow): Order => ({ id: Number(row.id), sku: row.sku, qty: Number(row.qty), status: row.status, version: Number(row.version) });

// The order's row is locked (FOR UPDATE OF o) until the transaction ends: two writers of one order
// check and change it one after the other, each on the other's committed result.
const SELECT_FOR_UPDATE = `
SELECT o.id, o.sku, o.qty, o.status, COALESCE(a.last_seq, 0) AS version
  FROM orders o LEFT JOIN outbox_aggregates a ON a.aggregate_id = '${ORDER_AGGREGATE}:' || o.id
 WHERE o.id = $1
   FOR UPDATE OF o`;

/**
 * The order service on PostgreSQL, beside the SQLite one (order-service.ts): the same writes, events,
 * payloads and errors, each write one pg transaction on a connection of `pool` that changes `orders`
 * and appends the event with the library's `createPgOutbox(...).append`. Inputs must already be
 * validated (see validate.ts). `createPgLabSchema` must have run (`outbox init`).
 */
export async function createPgOrderService(pool: Pool) {
  const outbox = await createPgOutbox(pool, { events: orderEvents });

  async function inTransaction<R>(fn: (client: PoolClient) => Promise<R>): Promise<R> {
    const client = await pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => (broken = true));
      throw error;
    } finally {
      client.release(broken);
    }
  }

  async function appendEvent<T extends EventType>(client: PoolClient, order: Omit<Order, 'version'>, type: T, payload: PayloadInputOf<OrderEvents, T>): Promise<OrderWrite> {
    const { eventId, seq } = await outbox.append(client, { aggregateType: ORDER_AGGREGATE, aggregateId: order.id, type, payload });
    return { order: { ...order, version: seq }, eventId, seq, eventType: type };
  }

  async function placeOne(client: PoolClient, { sku, qty }: NewOrder): Promise<OrderWrite> {
    const { rows } = await client.query<{ id: string }>({ name: 'orders-insert', text: 'INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id', values: [sku, qty] });
    const id = Number(rows[0].id);
    crashPoint('producer.mid-transaction', () => `crash point producer.mid-transaction: dying after inserting order ${id}`);
    return appendEvent(client, { id, sku, qty, status: 'PLACED' }, 'OrderPlaced', { orderId: id, sku, qty });
  }

  async function liveOrder(client: PoolClient, id: number, action: string): Promise<Order> {
    const { rows } = await client.query<OrderRow>({ name: 'orders-select-for-update', text: SELECT_FOR_UPDATE, values: [id] });
    if (rows.length === 0) throw new NotFoundError(`no order ${id}: cannot ${action}`);
    const order = toOrder(rows[0]);
    if (order.status === 'CANCELLED') throw new ConflictError(`order ${id} is already cancelled: cannot ${action}`);
    return order;
  }

  return {
    /** One order and its OrderPlaced event, one transaction. */
    placeOrder: (order: NewOrder): Promise<OrderWrite> => inTransaction((client) => placeOne(client, order)),
    /** Many orders in one transaction: the batch API. */
    placeOrders: (orders: NewOrder[]): Promise<OrderWrite[]> =>
      inTransaction(async (client) => {
        const written = [];
        for (const order of orders) written.push(await placeOne(client, order));
        return written;
      }),
    changeQty: (id: number, qty: number): Promise<OrderWrite> =>
      inTransaction(async (client) => {
        const order = await liveOrder(client, id, 'change its quantity');
        if (order.qty === qty) throw new ConflictError(`order ${id} already has qty ${qty}: nothing to change`);
        await client.query('UPDATE orders SET qty = $1 WHERE id = $2', [qty, id]);
        return appendEvent(client, { ...order, qty }, 'OrderQtyChanged', { orderId: id, sku: order.sku, qty, previousQty: order.qty });
      }),
    cancelOrder: (id: number): Promise<OrderWrite> =>
      inTransaction(async (client) => {
        const order = await liveOrder(client, id, 'cancel it');
        await client.query("UPDATE orders SET status = 'CANCELLED' WHERE id = $1", [id]);
        return appendEvent(client, { ...order, status: 'CANCELLED' }, 'OrderCancelled', { orderId: id, sku: order.sku, qty: order.qty });
      }),
    async getOrder(id: number): Promise<Order | undefined> {
      const { rows } = await pool.query<OrderRow>(
        `SELECT o.id, o.sku, o.qty, o.status, COALESCE(a.last_seq, 0) AS version
           FROM orders o LEFT JOIN outbox_aggregates a ON a.aggregate_id = '${ORDER_AGGREGATE}:' || o.id WHERE o.id = $1`,
        [id],
      );
      return rows[0] && toOrder(rows[0]);
    },
  };
}

export type PgOrderService = Awaited<ReturnType<typeof createPgOrderService>>;
