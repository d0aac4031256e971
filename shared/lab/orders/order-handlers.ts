import { effect } from '../../outbox/consumer/effects.js';
import { defineRedisHandlers, PoisonEventError } from '../../outbox/consumer/handlers.js';
import { INVENTORY_KEY } from './order-keys.js';
import { orderEvents } from './order-events.js';
import { inventoryDelta } from './order-inventory.js';
import type { OrderEventBody } from './order-message.js';

/** The event's change to the reserved quantity of its SKU. The payload names its order: one filed under another order contradicts itself (poison). */
function reserve(e: OrderEventBody & { aggregateId: string }) {
  if (String(e.payload.orderId) !== e.aggregateId) {
    throw new PoisonEventError(`payload.orderId ${e.payload.orderId} is not the order of aggregate_id order:${e.aggregateId}`);
  }
  return [effect.hincrby(INVENTORY_KEY, e.payload.sku, inventoryDelta(e))];
}

/**
 * The lab's consumer: an order reserves inventory, `HINCRBY inventory:reserved <sku> <change>`,
 * applied once per event by the apply script together with its dedupe marker and ack.
 */
export const handlers = defineRedisHandlers(orderEvents, {
  OrderPlaced: reserve,
  OrderQtyChanged: reserve,
  OrderCancelled: reserve,
});
