import { handlers } from '../../shared/lab/orders/order-handlers.js';
import { createOrderService } from '../../shared/lab/orders/order-service.js';
import { createConsumer } from '../../shared/outbox/consumer/create-consumer.js';
import { closeRedis, connectRedis } from '../../shared/outbox/redis/connect.js';
import { createRelay } from '../../shared/outbox/relay/relay.js';
import { assertSameStore } from '../../shared/outbox/relay/store-pairing.js';
import { openDatabase } from '../../shared/outbox/store/open-database.js';
import type { CliEnv } from './cli.js';

/**
 * What `outbox place-order`, `change-qty`, `cancel-order`, `relay` and `consume` do, run in this
 * process through the functions those commands call, for a test whose subject comes after them (a
 * prune, a repair, a refusal): each CLI start-up costs about 0.2 s of CPU, and these steps made a
 * third of the suite's. The commands themselves are tested as processes in init-and-orders, relay,
 * consumer and cli. On app.db, with no namespace.
 */
export interface Orders {
  /** `place-order --count <count> [--sku] [--qty]`: each order in its own transaction. */
  place(count: number, order?: { sku?: string; qty?: number }): void;
  changeQty(id: number, qty: number): void;
  cancel(id: number): void;
  /** `relay`: every PENDING row pushed and marked, after the same store check. */
  relay(): Promise<void>;
  /** `consume`: the queue drained through the lab's handlers by the consumer `cli`. */
  consume(): Promise<void>;
}

export function orders(env: () => CliEnv): Orders {
  const withDb = <T>(fn: (db: ReturnType<typeof openDatabase>) => T): T => {
    const db = openDatabase(env().dir);
    try {
      return fn(db);
    } finally {
      db.close();
    }
  };
  const withRedis = async <T>(fn: (redis: Awaited<ReturnType<typeof connectRedis>>) => Promise<T>): Promise<T> => {
    const redis = await connectRedis(env().redisUrl, { name: 'outbox-test' });
    try {
      return await fn(redis);
    } finally {
      await closeRedis(redis);
    }
  };
  return {
    place: (count, { sku = 'SKU-1', qty = 1 } = {}) =>
      withDb((db) => {
        const service = createOrderService(db);
        for (let i = 0; i < count; i += 1) service.placeOrder({ sku, qty });
      }),
    changeQty: (id, qty) => void withDb((db) => createOrderService(db).changeQty(id, qty)),
    cancel: (id) => void withDb((db) => createOrderService(db).cancelOrder(id)),
    relay: () =>
      withRedis(async (redis) => {
        const db = openDatabase(env().dir);
        try {
          await assertSameStore(db, redis);
          await createRelay(db, redis).relayAll();
        } finally {
          db.close();
        }
      }),
    consume: () =>
      withRedis(async (redis) => {
        await (await createConsumer({ redis, handlers, consumerId: 'cli' })).drain();
      }),
  };
}
