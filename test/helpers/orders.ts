import assert from 'node:assert/strict';
import { verifyTable } from '../../apps/cli/commands/verify.js';
import { onPostgres, withPartitions, withPartitionStores, withPg, withPgOrders, withPgPartitionStores } from '../../apps/cli/stores.js';
import { createDatabase } from '../../shared/lab/init-stores.js';
import { handlers } from '../../shared/lab/orders/order-handlers.js';
import { createOrderService } from '../../shared/lab/orders/order-service.js';
import { recreatePgLabSchema } from '../../shared/lab/orders/pg-order-service.js';
import type { OutboxConfig } from '../../shared/outbox/config.js';
import { createConsumer } from '../../shared/outbox/consumer/create-consumer.js';
import { createPgRelay } from '../../shared/outbox/postgres/pg-relay.js';
import { parseDuration } from '../../shared/outbox/duration.js';
import { clearProjectKeys } from '../../shared/outbox/redis/project-keys.js';
import { createRelay } from '../../shared/outbox/relay/relay.js';
import { openDatabase } from '../../shared/outbox/store/open-database.js';
import { storeConfigOf } from '../../shared/runtime/config/store-settings.js';
import type { CliEnv } from './cli.js';

/**
 * What `outbox init --force --yes`, `place-order`, `change-qty`, `cancel-order`, `relay`, `consume`
 * and `verify` do, run in this process through the functions those commands call, for a test whose
 * subject they are not: the steps that set it up (before a prune, a repair, a refusal) and the last
 * look at the stores after it. Each CLI process costs 0.4-0.6 s of CPU, and such steps were half of
 * the suite's. The commands themselves are tested as processes in init-and-orders, relay, consumer,
 * cli, the verify files and the partition and PostgreSQL CLI suites.
 *
 * The stores are the ones the command would use with `env`: app.db in its dir, or PostgreSQL when
 * it sets OUTBOX_DATABASE_URL; the partitions, Redis Cluster and namespace it sets.
 */
export interface Orders {
  /** `place-order --count <count> [--sku] [--qty]` on app.db: each order in its own transaction. */
  place(count: number, order?: { sku?: string; qty?: number }): void;
  changeQty(id: number, qty: number): void;
  cancel(id: number): void;
  /** `relay`: every PENDING row pushed and marked, after the same store checks. */
  relay(): Promise<void>;
  /** `consume`: the queues drained through the lab's handlers by the consumer `cli`. */
  consume(): Promise<void>;
  /**
   * `verify --settle <settle>` (default 5s, as the command's) judged in this process with the same
   * stores and check set: asserts VERIFY OK and resolves the table it prints, for a test's last look
   * at the stores after its subject. Where verify's output or exit code is the subject, run it.
   */
  verify(settle?: string): Promise<string>;
  /** `init --force --yes`: a new, empty store (app.db, or the lab's tables on PostgreSQL) and no key of this project in any partition. */
  init(): Promise<void>;
  /** The order commands on the PostgreSQL store (`env` sets OUTBOX_DATABASE_URL). */
  pg: {
    place(count: number, order?: { sku?: string; qty?: number }): Promise<void>;
    changeQty(id: number, qty: number): Promise<void>;
    cancel(id: number): Promise<void>;
  };
}

/** The stores' settings the CLI would read with `env`'s variables (and nothing else of this process's environment). */
export function configOfEnv({ dir, redisUrl, env = {} }: CliEnv): OutboxConfig {
  return storeConfigOf({}, { OUTBOX_DIR: dir, REDIS_URL: redisUrl, ...env });
}

export function orders(env: () => CliEnv): Orders {
  const config = () => configOfEnv(env());
  const withDb = <T>(fn: (db: ReturnType<typeof openDatabase>) => T): T => {
    const db = openDatabase(config().dir);
    try {
      return fn(db);
    } finally {
      db.close();
    }
  };
  const needs = { requireNoEviction: true };
  return {
    place: (count, { sku = 'SKU-1', qty = 1 } = {}) =>
      withDb((db) => {
        const service = createOrderService(db);
        for (let i = 0; i < count; i += 1) service.placeOrder({ sku, qty });
      }),
    changeQty: (id, qty) => void withDb((db) => createOrderService(db).changeQty(id, qty)),
    cancel: (id) => void withDb((db) => createOrderService(db).cancelOrder(id)),
    relay: async () => {
      const c = config();
      if (onPostgres(c)) await withPgPartitionStores(c, (pool, partitions) => createPgRelay(pool, partitions).relayAll(), needs);
      else await withPartitionStores(c, (db, partitions) => createRelay(db, partitions).relayAll(), needs);
    },
    consume: () =>
      withPartitions(
        config(),
        async (partitions) => {
          await (await createConsumer({ redis: partitions, handlers, consumerId: 'cli' })).drain();
        },
        needs,
      ),
    verify: async (settle = '5s') => {
      const { table, failed } = await verifyTable(config(), parseDuration(settle, '--settle'));
      assert.equal(failed, 0, table);
      return table;
    },
    init: async () => {
      const c = config();
      if (onPostgres(c)) await withPg(c, (pool) => recreatePgLabSchema(pool), { tables: false });
      else createDatabase(c.dir);
      await withPartitions(c, (partitions) => clearProjectKeys(partitions));
    },
    pg: {
      place: (count, { sku = 'SKU-1', qty = 1 } = {}) =>
        withPgOrders(config(), async (service) => {
          for (let i = 0; i < count; i += 1) await service.placeOrder({ sku, qty });
        }),
      changeQty: (id, qty) => withPgOrders(config(), async (service) => void (await service.changeQty(id, qty))),
      cancel: (id) => withPgOrders(config(), async (service) => void (await service.cancelOrder(id))),
    },
  };
}
