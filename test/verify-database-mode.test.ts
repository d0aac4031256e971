import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { orderDatabaseHandlers, reservedInDatabase } from '../shared/lab/orders/order-database-handlers.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { useHarness } from './helpers/harness.js';
import { readDb } from './helpers/stores.js';
import { runCli } from './helpers/cli.js';

const h = useHarness();
const consumerDb = () => join(h.env.dir, 'consumer.db');

/** The lab's events: orders placed, some changed, some cancelled; relayed to outbox.events. Resolves their number. */
async function seedLabEvents(orders: number): Promise<number> {
  const db = openDatabase(h.env.dir);
  const redis = await connectRedis(h.env.redisUrl);
  try {
    const service = createOrderService(db);
    let events = 0;
    for (let i = 0; i < orders; i += 1) {
      const { order } = service.placeOrder({ sku: `SKU-${i % 3}`, qty: 1 + (i % 4) });
      events += 1;
      if (i % 2 === 0) (service.changeQty(order.id, 7), (events += 1));
      if (i % 5 === 0) (service.cancelOrder(order.id), (events += 1));
    }
    await createRelay(db, redis).relayAll();
    return events;
  } finally {
    db.close();
    redis.disconnect();
  }
}

/** Drains outbox.events through the public createConsumer with the lab's database handler set. */
async function drainInDatabaseMode(): Promise<number> {
  const redis = await connectRedis(h.env.redisUrl);
  const consumer = await createConsumer({ redis, handlers: orderDatabaseHandlers, database: consumerDb(), consumerId: 'db' });
  try {
    return (await consumer.drain()).applied;
  } finally {
    await consumer.close();
    redis.disconnect();
  }
}

/** SKU -> quantity the live orders reserve, from app.db. */
function liveReservations(): Map<string, number> {
  const db = readDb(h.env.dir);
  try {
    const rows = db.prepare<[], { sku: string; qty: number }>("SELECT sku, SUM(qty) AS qty FROM orders WHERE status != 'CANCELLED' GROUP BY sku").all();
    return new Map(rows.map((r) => [r.sku, r.qty]));
  } finally {
    db.close();
  }
}

describe('verify in database mode (--consumer-db)', () => {
  it('passes after a database-mode run of the lab’s events: the inbox checked, the Redis inventory check shown as not run', async () => {
    const events = await seedLabEvents(20);
    assert.equal(await drainInDatabaseMode(), events);
    // The lab's database handlers hold the reservation in the consumer's file, none in Redis.
    const db = new Database(consumerDb(), { readonly: true });
    try {
      const reserved = reservedInDatabase(db);
      for (const [sku, qty] of liveReservations()) assert.equal(reserved.get(sku), qty, sku);
    } finally {
      db.close();
    }
    assert.equal(await h.client.exists('inventory:reserved'), 0);

    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /SKUs whose reserved qty != live orders +- +not run: database mode, no effect in Redis +info/);
    assert.match(verify.stdout, /processed events without an inbox row \(effect missing from the consumer database\) +0 +0 +ok/);
    assert.match(verify.stdout, new RegExp(`inbox rows / of them committed, completion pending +- +${events} / 0 +info`));
    assert.match(verify.stdout, /^VERIFY OK$/m);

    // Without the option verify judges Redis mode, as before: the inventory database mode never wrote fails.
    const asRedisMode = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(asRedisMode.code, 1);
    assert.match(asRedisMode.stdout, /SKUs whose reserved qty != live orders +0 +[1-9]\d* +FAIL/);
  });

  it('fails when a processed event has no inbox row in the consumer database', async () => {
    await seedLabEvents(6);
    await drainInDatabaseMode();
    const db = new Database(consumerDb());
    const gone = db.prepare('SELECT event_id FROM outbox_inbox ORDER BY event_id LIMIT 1').pluck().get() as string;
    db.prepare('DELETE FROM outbox_inbox WHERE event_id = ?').run(gone);
    db.close();

    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 1, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /processed events without an inbox row \(effect missing from the consumer database\) +0 +1 +FAIL/);
    assert.ok(verify.stdout.includes(`e.g. ${gone}`), verify.stdout);
    assert.match(verify.stdout, /^VERIFY FAILED: 1 invariant broken$/m);
  });

  it('Redis mode is unchanged: the inventory is checked, and a wrong one fails', async () => {
    await seedLabEvents(6);
    await h.cli('consume');
    const verify = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /SKUs whose reserved qty != live orders +0 +0 +ok/);

    await h.client.hincrby('inventory:reserved', 'SKU-0', 1);
    const wrong = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stdout, /SKUs whose reserved qty != live orders +0 +1 +FAIL/);
  });
});
