import { crashPoint } from '../../outbox/crash-point.js';
import type { Db } from '../../outbox/store/open-database.js';
import { ConflictError } from '../../outbox/errors/conflict-error.js';
import { NotFoundError } from '../../outbox/errors/not-found-error.js';
import { createOutbox } from '../../outbox/store/outbox.js';
import type { EventTypeOf, PayloadInputOf } from '../../outbox/events/define-events.js';
import { orderEvents, ORDER_AGGREGATE, type OrderEvents } from './order-events.js';

type EventType = EventTypeOf<OrderEvents>;

export interface NewOrder {
  sku: string;
  qty: number;
}

export interface Order {
  id: number;
  sku: string;
  qty: number;
  status: 'PLACED' | 'CANCELLED';
  /** The seq of the order's last event (its outbox_aggregates row). */
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
 * The order service, a user of the public API: every write changes `orders` and appends the
 * matching event with `createOutbox(...).append` in one IMMEDIATE transaction of its own, so either
 * both rows exist or neither does; the event's seq comes from append. Inputs must already be
 * validated (see validate.ts). Statements are prepared once per service.
 */
export function createOrderService(db: Db) {
  const outbox = createOutbox(db, { events: orderEvents });
  const insertOrder = db.prepare<[string, number]>('INSERT INTO orders (sku, qty) VALUES (?, ?)');
  const selectOrder = db.prepare<[number], Order>(
    // LEFT JOIN: an order whose events were lost (verify names it) is still found, at version 0.
    `SELECT o.id, o.sku, o.qty, o.status, COALESCE(a.last_seq, 0) AS version
       FROM orders o LEFT JOIN outbox_aggregates a ON a.aggregate_id = '${ORDER_AGGREGATE}:' || o.id
      WHERE o.id = ?`,
  );
  const updateQty = db.prepare<[number, number]>('UPDATE orders SET qty = ? WHERE id = ?');
  const markCancelled = db.prepare<[number]>("UPDATE orders SET status = 'CANCELLED' WHERE id = ?");

  function appendEvent<T extends EventType>(order: Omit<Order, 'version'>, type: T, payload: PayloadInputOf<OrderEvents, T>): OrderWrite {
    const { eventId, seq } = outbox.append({ aggregateType: ORDER_AGGREGATE, aggregateId: order.id, type, payload });
    return { order: { ...order, version: seq }, eventId, seq, eventType: type };
  }

  function placeOne({ sku, qty }: NewOrder): OrderWrite {
    const id = Number(insertOrder.run(sku, qty).lastInsertRowid);
    crashPoint('producer.mid-transaction', () => `crash point producer.mid-transaction: dying after inserting order ${id}`);
    return appendEvent({ id, sku, qty, status: 'PLACED' }, 'OrderPlaced', { orderId: id, sku, qty });
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
    updateQty.run(qty, id);
    return appendEvent({ ...order, qty }, 'OrderQtyChanged', { orderId: id, sku: order.sku, qty, previousQty: order.qty });
  });

  const cancel = db.transaction((id: number): OrderWrite => {
    const order = liveOrder(id, 'cancel it');
    markCancelled.run(id);
    return appendEvent({ ...order, status: 'CANCELLED' }, 'OrderCancelled', { orderId: id, sku: order.sku, qty: order.qty });
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
