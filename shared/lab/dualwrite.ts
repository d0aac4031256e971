import { Redis } from 'ioredis';
import { keys } from '../outbox/redis/keys.js';
import { keyPrefixOfConnection } from '../outbox/redis/scan-keys.js';

export interface DualWriteResult {
  /** Orders in the scratch store after the run. */
  orders: number;
  /** Events on the dual-write list after the run. */
  published: number;
  /** The publish error that caused the difference. */
  failure: string;
  /** The lines of dualwrite.out. */
  lines: string[];
}

/**
 * Where the dual write saves its orders: a scratch `orders` table of its own (dualwrite.db beside
 * app.db, or the table `dualwrite_orders` in the PostgreSQL store's database), so the lab's orders
 * and outbox are untouched. Each save commits on its own, as a service without the outbox does.
 */
export interface ScratchOrders {
  /** Where it is, for the command's last line. */
  readonly name: string;
  /** Drops what an earlier run left and creates the table, empty. */
  reset(): Promise<void>;
  /** Saves (commits) one order; resolves its id. */
  save(sku: string, qty: number): Promise<number>;
  count(): Promise<number>;
  close(): Promise<void>;
}

/**
 * The bug the outbox removes: save the order (commit), then publish the event as a second write.
 * The first `count - 1` publishes succeed; before the last one the broker connection really drops
 * (CLIENT KILL, no reconnect), so the order is committed and its event is lost. Uses its own
 * scratch store and list, so the lab's store and outbox.events are untouched. Closes `scratch`.
 */
export async function dualWrite(scratch: ScratchOrders, redis: Redis, url: string, count = 3): Promise<DualWriteResult> {
  // Its keys go where `redis` reads them: under the namespace, like every key of the project.
  const publisher = new Redis(url, {
    lazyConnect: true,
    keyPrefix: keyPrefixOfConnection(redis),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  publisher.on('error', () => {});
  let failure = 'no publish failed';
  try {
    await scratch.reset();
    await redis.del(keys.dualwriteEvents);
    await publisher.connect();
    for (let i = 1; i <= count; i += 1) {
      const id = await scratch.save(`SKU-${i}`, 1);
      if (i === count) {
        const closed = new Promise((resolve) => publisher.once('end', resolve));
        await redis.client('KILL', 'ID', String(await publisher.client('ID')));
        await closed;
      }
      try {
        await publisher.rpush(keys.dualwriteEvents, JSON.stringify({ type: 'OrderPlaced', orderId: id, sku: `SKU-${i}`, qty: 1 }));
      } catch (error) {
        failure = `order ${id} was saved, then publishing its event failed: ${(error as Error).message}`;
      }
    }
    const orders = await scratch.count();
    const published = await redis.llen(keys.dualwriteEvents);
    const verdict = orders === published ? 'CONSISTENT' : 'INCONSISTENT';
    return { orders, published, failure, lines: [`${verdict} orders=${orders} published=${published}`, failure] };
  } finally {
    publisher.disconnect();
    await scratch.close();
  }
}
