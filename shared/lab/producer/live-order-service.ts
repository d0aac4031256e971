import type { DatabaseWatch, LiveDatabase } from '../../outbox/store/live-database.js';
import { StoreUnavailableError } from '../../outbox/errors/store-unavailable-error.js';
import { createOrderService, type OrderService } from '../orders/order-service.js';

/**
 * The order service of the producer app, on whatever file is app.db now. Every write checks,
 * after its transaction committed and before anyone is told it succeeded, that the file it
 * committed to is still app.db: a write into a deleted or replaced file is lost, so it is a
 * `StoreUnavailableError` (503), never a success. Without a live app.db every call is one.
 */
export function createLiveOrderService(watch: DatabaseWatch): OrderService {
  let cached: { live: LiveDatabase; service: OrderService } | undefined;

  function serviceOn(live: LiveDatabase): OrderService {
    if (cached?.live !== live) cached = { live, service: createOrderService(live.db) };
    return cached.service;
  }

  function write<T>(operation: (service: OrderService) => T): T {
    const result = operation(serviceOn(watch.current()));
    if (!watch.check()) throw new StoreUnavailableError(`${watch.reason()}; this write went to the old file and is lost`);
    return result;
  }

  return {
    placeOrder: (order) => write((service) => service.placeOrder(order)),
    placeOrders: (orders) => write((service) => service.placeOrders(orders)),
    changeQty: (id, qty) => write((service) => service.changeQty(id, qty)),
    cancelOrder: (id) => write((service) => service.cancelOrder(id)),
    getOrder: (id) => serviceOn(watch.current()).getOrder(id),
  };
}
