import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import type { OutboxConfig } from '../outbox/config.js';
import { openDatabase, type Db } from '../outbox/store/open-database.js';
import { createRelay } from '../outbox/relay/relay.js';
import { createPgRelay } from '../outbox/postgres/pg-relay.js';
import { pgStoreName } from '../outbox/postgres/pg-store-meta.js';
import { pgVerifyReads } from '../operations/verify/pg-verify-reads.js';
import type { VerifyReads } from '../operations/verify/observe.js';
import { createDatabase } from './init-stores.js';
import { pgScratchOrders, sqliteScratchOrders } from './dualwrite-stores.js';
import type { ScratchOrders } from './dualwrite.js';
import { createOrderService, type NewOrder, type OrderWrite } from './orders/order-service.js';
import { createPgOrderService, recreatePgLabSchema } from './orders/pg-order-service.js';
import { countPgStores, countStores, type StoreCounts } from './report.js';

/** The order writes the lab makes; synchronous on app.db, a promise on PostgreSQL. */
export interface LabOrders {
  placeOrder(order: NewOrder): OrderWrite | Promise<OrderWrite>;
  changeQty(id: number, qty: number): OrderWrite | Promise<OrderWrite>;
  cancelOrder(id: number): OrderWrite | Promise<OrderWrite>;
}

/** The store side of the lab: app.db in the data dir, or the PostgreSQL store. Everything else is the same on both. */
export interface LabStore {
  /** What step 1 makes, in its title: "app.db", or "orders and outbox tables". */
  readonly fresh: string;
  /** Step 1: deletes the lab's tables and creates them again, empty, with a new store id; resolves what it created. */
  recreate(): Promise<string>;
  /** Step 2's scratch orders, beside the lab's. */
  scratch(): ScratchOrders;
  /** After `recreate`. */
  orders(): Promise<LabOrders>;
  relay(redis: Redis): { relayAll(): Promise<{ events: number }> };
  counts(redis: Redis): Promise<StoreCounts>;
  verifyReads(): Db | VerifyReads;
  /**
   * Resolves once a relay killed between push and commit holds no row any more: on PostgreSQL its
   * batch stays locked until the server notices the session is gone, and a relay skips locked rows.
   */
  crashedRelayGone(): Promise<void>;
  close(): void;
}

/** The lab on app.db in `config.dir`. */
export function sqliteLabStore(config: OutboxConfig): LabStore {
  let db: Db | undefined;
  const open = () => (db ??= openDatabase(config.dir));
  return {
    fresh: 'app.db',
    async recreate() {
      return createDatabase(config.dir);
    },
    scratch: () => sqliteScratchOrders(config.dir),
    orders: async () => createOrderService(open()),
    relay: (redis) => createRelay(open(), redis),
    counts: (redis) => countStores(open(), redis),
    verifyReads: open,
    // A relay on app.db marks its batch in a transaction of its own, after the push: the killed one held nothing.
    crashedRelayGone: async () => {},
    close: () => db?.close(),
  };
}

/** The lab on the PostgreSQL store, on `pool` (the caller ends it). */
export function pgLabStore(pool: Pool): LabStore {
  return {
    fresh: 'orders and outbox tables',
    async recreate() {
      await recreatePgLabSchema(pool);
      return `the orders and outbox tables in ${await pgStoreName(pool)}`;
    },
    scratch: () => pgScratchOrders(pool, 'this database'),
    orders: () => createPgOrderService(pool),
    relay: (redis) => createPgRelay(pool, redis),
    counts: (redis) => countPgStores(pool, redis),
    verifyReads: () => pgVerifyReads(pool),
    async crashedRelayGone() {
      // FOR UPDATE without SKIP LOCKED waits for the dead session's row locks (bounded: lock_timeout).
      const client = await pool.connect();
      let broken = false;
      try {
        await client.query('BEGIN');
        await client.query("SET LOCAL lock_timeout = '30s'");
        await client.query("SELECT id FROM outbox WHERE status = 'PENDING' FOR UPDATE");
        await client.query('COMMIT');
      } catch (error) {
        broken = true;
        throw error;
      } finally {
        client.release(broken);
      }
    },
    close: () => {},
  };
}
