import type { Database, Statement } from 'better-sqlite3';
import { defineDatabaseHandlers, PoisonEventError } from '../../outbox/consumer/handlers.js';
import { orderEvents } from './order-events.js';
import { inventoryDelta } from './order-inventory.js';
import type { OrderEventBody } from './order-message.js';

/**
 * The lab's consumer in database mode: the same reservation as the Redis-effects handlers
 * (order-handlers.ts), kept in the consumer's own SQLite file instead — a row per live order and a
 * running total per SKU, written in the transaction that records the event in the inbox.
 */
export const ORDER_DATABASE_SCHEMA = `
CREATE TABLE IF NOT EXISTS reservations (order_id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reserved (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL);
`;

interface Statements {
  place: Statement;
  change: Statement;
  cancel: Statement;
  total: Statement;
}

// Prepared once per connection (a prepare costs more than the write); the tables created with them.
const statements = new WeakMap<Database, Statements>();

function prepared(db: Database): Statements {
  let s = statements.get(db);
  if (!s) {
    db.exec(ORDER_DATABASE_SCHEMA);
    s = {
      place: db.prepare('INSERT INTO reservations (order_id, sku, qty) VALUES (?, ?, ?)'),
      change: db.prepare('UPDATE reservations SET qty = ? WHERE order_id = ?'),
      cancel: db.prepare('DELETE FROM reservations WHERE order_id = ?'),
      total: db.prepare('INSERT INTO reserved (sku, qty) VALUES (?, ?) ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty'),
    };
    statements.set(db, s);
  }
  return s;
}

/** The payload names its order: one filed under another order contradicts itself (poison), as in the Redis handlers. */
function orderOf(e: OrderEventBody & { aggregateId: string }): number {
  if (String(e.payload.orderId) !== e.aggregateId) {
    throw new PoisonEventError(`payload.orderId ${e.payload.orderId} is not the order of aggregate_id order:${e.aggregateId}`);
  }
  return e.payload.orderId;
}

function reserve(e: OrderEventBody & { aggregateId: string }, db: Database): void {
  const orderId = orderOf(e);
  const s = prepared(db);
  if (e.type === 'OrderPlaced') s.place.run(orderId, e.payload.sku, e.payload.qty);
  else if (e.type === 'OrderQtyChanged') s.change.run(e.payload.qty, orderId);
  else s.cancel.run(orderId);
  s.total.run(e.payload.sku, inventoryDelta(e));
}

export const orderDatabaseHandlers = defineDatabaseHandlers(orderEvents, {
  OrderPlaced: reserve,
  OrderQtyChanged: reserve,
  OrderCancelled: reserve,
});

/** SKU -> reserved quantity, as the consumer's database holds it (empty before the first event). */
export function reservedInDatabase(db: Database): Map<string, number> {
  const exists = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reserved'").get();
  if (!exists) return new Map();
  return new Map(db.prepare<[], { sku: string; qty: number }>('SELECT sku, qty FROM reserved').all().map((r) => [r.sku, r.qty]));
}
