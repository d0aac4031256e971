import { z } from 'zod';
import { defineEvents, type AnyDeliveredEvent } from '../../outbox/events/define-events.js';
import { ORDER_AGGREGATE } from './order-keys.js';

export { ORDER_AGGREGATE };

const orderId = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);
const sku = z.string().min(1).max(64);
const qty = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);

/** The events an order emits, in the order its lifecycle allows. */
export const orderEvents = defineEvents({
  OrderPlaced: { aggregate: ORDER_AGGREGATE, payload: z.object({ orderId, sku, qty }) },
  OrderQtyChanged: { aggregate: ORDER_AGGREGATE, payload: z.object({ orderId, sku, qty, previousQty: qty }) },
  /** `qty` is the quantity the cancelled order had reserved. */
  OrderCancelled: { aggregate: ORDER_AGGREGATE, payload: z.object({ orderId, sku, qty }) },
});

export type OrderEvents = typeof orderEvents.declarations;
export type DeliveredOrderEvent = AnyDeliveredEvent<OrderEvents>;

/** The key of order `id`: `order:<id>`. */
export const orderKey = (id: number): string => `${ORDER_AGGREGATE}:${id}`;
