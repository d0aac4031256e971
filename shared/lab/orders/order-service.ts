import { randomUUID } from 'node:crypto';
import { crashPoint } from '../../outbox/crash-point.js';
import type { Db } from '../../outbox/store/open-database.js';
import { ConflictError } from '../../outbox/errors/conflict-error.js';
import { NotFoundError } from '../../outbox/errors/not-found-error.js';
import type { EventPayload, EventType } from '../../outbox/store/events.js';

export interface NewOrder {
  sku: string;
  qty: number;
}

export interface Order {
  id: number;
  sku: string;
  qty: number;
  status: 'PLACED' | 'CANCELLED';
  version: number;
}

/** What a write committed: the order as it now is, and the event it appended to the outbox. */
export interface OrderWrite {
  order: Order;
  eventId: string;
  seq: number;
  eventType: EventType;
}

/**
 * The order service: every write changes `orders` and appends the matching event to `outbox` in
 * one IMMEDIATE transaction, so either both rows exist or neither does. Inputs must already be
 * validated (see validate.ts). Statements are prepared once per service.
 */
export function createOrderService(db: Db) {
  const insertOrder = db.prepare<[string, number]>('INSERT INTO orders (sku, qty) VALUES (?, ?)');
  const selectOrder = db.prepare<[number], Order>('SELECT id, sku, qty, status, version FROM orders WHERE id = ?');
  const updateQty = db.prepare<[number, number, number]>('UPDATE orders SET qty = ?, version = ? WHERE id = ?');
  const markCancelled = db.prepare<[number, number]>("UPDATE orders SET status = 'CANCELLED', version = ? WHERE id = ?");
  const insertEvent = db.prepare<[string, number, number, string, string, number]>(
    'INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)',
  );

  function appendEvent(order: Order, type: EventType, payload: EventPayload): OrderWrite {
    const eventId = randomUUID();
    insertEvent.run(eventId, order.id, order.version, type, JSON.stringify(payload), Date.now());
    return { order, eventId, seq: order.version, eventType: type };
  }

  function placeOne({ sku, qty }: NewOrder): OrderWrite {
    const id = Number(insertOrder.run(sku, qty).lastInsertRowid);
    crashPoint('producer.mid-transaction', () => `crash point producer.mid-transaction: dying after inserting order ${id}`);
    return appendEvent({ id, sku, qty, status: 'PLACED', version: 1 }, 'OrderPlaced', { orderId: id, sku, qty });
  }

  function liveOrder(id: number, action: string): Order {
    const order = selectOrder.get(id);
    if (!order) throw new NotFoundError(`no order ${id}: cannot ${action}`);
    if (order.status === 'CANCELLED') throw new ConflictError(`order ${id} is already cancelled: cannot ${action}`);
    return order;
  }

  const place = db.transaction(placeOne);
  const placeMany = db.transaction((orders: NewOrder[]) => orders.map(placeOne));

  const changeQty = db.transaction((id: number, qty: number): OrderWrite => {
    const order = liveOrder(id, 'change its quantity');
    if (order.qty === qty) throw new ConflictError(`order ${id} already has qty ${qty}: nothing to change`);
    const next: Order = { ...order, qty, version: order.version + 1 };
    updateQty.run(qty, next.version, id);
    return appendEvent(next, 'OrderQtyChanged', { orderId: id, sku: order.sku, qty, previousQty: order.qty });
  });

  const cancel = db.transaction((id: number): OrderWrite => {
    const order = liveOrder(id, 'cancel it');
    const next: Order = { ...order, status: 'CANCELLED', version: order.version + 1 };
    markCancelled.run(next.version, id);
    return appendEvent(next, 'OrderCancelled', { orderId: id, sku: order.sku, qty: order.qty });
  });

  return {
    /** One order and its OrderPlaced event, one transaction. */
    placeOrder: (order: NewOrder): OrderWrite => place.immediate(order),
    /** Many orders in one transaction: the batch API. */
    placeOrders: (orders: NewOrder[]): OrderWrite[] => placeMany.immediate(orders),
    changeQty: (id: number, qty: number): OrderWrite => changeQty.immediate(id, qty),
    cancelOrder: (id: number): OrderWrite => cancel.immediate(id),
    getOrder: (id: number): Order | undefined => selectOrder.get(id),
  };
}

export type OrderService = ReturnType<typeof createOrderService>;
