import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createConsumerEngine, emptyStats } from '../shared/outbox/consumer/consumer.js';
import { runRedisHandlers } from '../shared/outbox/consumer/run-redis-handlers.js';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { runCli, startCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { readDb } from './helpers/stores.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { guardOf, guardsOf } from './helpers/guards.js';

const h = useHarness();
const o = orders(() => h.env);

function message(aggregateId: number, seq: number, type = 'OrderPlaced', payload: object = { orderId: aggregateId, sku: 'SKU-X', qty: 1 }) {
  return JSON.stringify({ event_id: `evt-${aggregateId}-${seq}`, aggregate_id: `order:${aggregateId}`, seq, event_type: type, payload, store_id: h.storeId });
}

/**
 * Places `orders` orders in batches, changes the quantity of every third and cancels every fifth
 * (so that aggregates have several events, far apart in the queue, whose order matters), and
 * relays them, in this process (fast setup for big runs). Resolves the number of events.
 */
async function seedEvents(orders: number, skus = 10): Promise<number> {
  const db = openDatabase(h.env.dir);
  const connection = await connectRedis(h.env.redisUrl);
  try {
    const service = createOrderService(db);
    for (let i = 0; i < orders; i += 1000) {
      service.placeOrders(Array.from({ length: Math.min(1000, orders - i) }, (_, j) => ({ sku: `SKU-${(i + j) % skus}`, qty: 1 + ((i + j) % 3) })));
    }
    let events = orders;
    for (let id = 3; id <= orders; id += 3, events += 1) service.changeQty(id, 7);
    for (let id = 5; id <= orders; id += 5, events += 1) service.cancelOrder(id);
    await createRelay(db, connection).relayAll();
    return events;
  } finally {
    db.close();
    connection.disconnect();
  }
}

function expectedInventory(): Record<string, string> {
  const db = readDb(h.env.dir);
  try {
    const rows = db.prepare("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku").all() as { sku: string; qty: number }[];
    return Object.fromEntries(rows.map((r) => [r.sku, String(r.qty)]));
  } finally {
    db.close();
  }
}

/** What must hold after any crash once the consumer has drained: each event applied exactly once. */
async function assertAppliedExactlyOnce(events: number) {
  assert.equal(await h.client.hlen('processed'), events);
  assert.equal(await h.client.llen('outbox.events'), 0);
  assert.deepEqual(await h.client.keys('outbox.events:processing:*').then((keys) => Promise.all(keys.map((k) => h.client.llen(k)))).then((l) => l.filter(Boolean)), []);
  assert.equal(await h.client.hget('outbox:stats', 'applied'), String(events));
  // A SKU whose orders were all cancelled is at 0 in Redis and absent from the live orders.
  const reserved = Object.entries(await h.client.hgetall('inventory:reserved')).filter(([, qty]) => qty !== '0');
  assert.deepEqual(Object.fromEntries(reserved), expectedInventory());
  const seen = await h.client.keys('outbox:seen:*');
  const processed = await h.client.hmget('processed', ...seen.map((key) => key.slice('outbox:seen:'.length)));
  assert.equal(processed.filter((value) => value === null).length, 0, 'a dedupe marker without its processed entry');
}

describe('outbox consume', () => {
  it('drains the queue, applies each unique event once and absorbs relay duplicates', async () => {
    o.place(2, { sku: 'SKU-A', qty: 2 });
    o.place(1, { sku: 'SKU-B', qty: 5 });
    o.changeQty(1, 3);
    o.cancel(2);
    await o.relay();
    o.place(1, { sku: 'SKU-B', qty: 1 });
    assert.equal((await runCli(['relay-crash'], h.env)).signal, 'SIGKILL');
    await o.relay();

    const result = await h.cli('consume');
    assert.match(result.stdout, /received 7 \(0 recovered from outbox\.events:processing:cli\): applied 6, duplicates skipped 1, parked 0, dead-lettered 0/);
    assert.match(result.stdout, /HLEN processed = 6/);
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '3', 'SKU-B': '6' });
    assert.deepEqual(await guardsOf(h.client), { 'order:1': '2', 'order:2': '2', 'order:3': '1', 'order:4': '1' });
    await assertAppliedExactlyOnce(6);
    const verify = await h.cli('verify');
    assert.match(verify.stdout, /VERIFY OK/);

    const again = await h.cli('consume');
    assert.match(again.stdout, /received 0/);
  });

  it('skips a redelivery by seq even after its dedupe marker expired', async () => {
    await h.client.rpush('outbox.events', message(1, 1));
    await h.cli('consume');
    await h.client.del('outbox:seen:evt-1-1');
    await h.client.rpush('outbox.events', message(1, 1));
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 1/);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-X'), '1');
  });

  it('parks an event that arrives ahead of a gap and applies it, in order, once the gap is filled', async () => {
    const placed = message(7, 1, 'OrderPlaced', { orderId: 7, sku: 'SKU-G', qty: 2 });
    const changed = message(7, 2, 'OrderQtyChanged', { orderId: 7, sku: 'SKU-G', qty: 5, previousQty: 2 });
    const cancelled = message(7, 3, 'OrderCancelled', { orderId: 7, sku: 'SKU-G', qty: 5 });
    await h.client.rpush('outbox.events', cancelled, changed);
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 2/);
    const parked = await h.client.hgetall('outbox.events:parked');
    assert.deepEqual(Object.keys(parked).sort(), ['order:7:2', 'order:7:3']);
    assert.equal(JSON.parse(parked['order:7:3']).reason, 'gap: expected seq 1, got 3');
    assert.equal(JSON.parse(parked['order:7:3']).message, cancelled);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-G'), null);

    await h.client.rpush('outbox.events', placed);
    assert.match((await h.cli('consume')).stdout, /applied 3/);
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    assert.equal(await guardOf(h.client, 'order:7'), '3');
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-G'), '0');
    assert.equal(await h.client.hget('outbox:stats', 'unparked'), '2');
  });

  it('dead-letters malformed entries, unknown types and payloads their schema refuses, with the reason, and keeps going', async () => {
    const bad: [string, string][] = [
      ['not json at all', 'not JSON'],
      ['[1,2,3]', 'not a JSON object'],
      [message(1, 1, 'OrderShipped'), 'unknown event type "OrderShipped": declare it in defineEvents'],
      [message(2, 1, 'OrderPlaced', { orderId: 2, sku: 'SKU-X', qty: -1 }), 'OrderPlaced payload: qty: Too small: expected number to be >0'],
      [message(3, 1, 'OrderPlaced', { orderId: 99, sku: 'SKU-X', qty: 1 }), 'payload.orderId 99 is not the order of aggregate_id order:3'],
      [JSON.stringify({ event_id: 'e', aggregate_id: 'order:4', seq: 0, event_type: 'OrderPlaced', payload: {} }), 'seq must be a positive integer'],
      [message(5, 1, 'OrderQtyChanged', { orderId: 5, sku: 'SKU-X', qty: 2 }), 'OrderQtyChanged payload: previousQty: Invalid input: expected number, received undefined'],
    ];
    await h.client.rpush('outbox.events', message(10, 1), ...bad.map(([raw]) => raw), message(11, 1));
    const result = await h.cli('consume');
    assert.match(result.stdout, /received 9 .*applied 2, .*dead-lettered 7/);
    const dead = (await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry));
    assert.deepEqual(dead.map((d) => [d.message, d.reason]), bad);
    assert.equal(await h.client.hlen('processed'), 2);
  });

  it('a consumer killed between LMOVE and ack loses nothing: the next run recovers its processing list', async () => {
    const events = await seedEvents(25);
    const crashed = await runCli(['consume', '--batch-size', '10'], { ...h.env, env: { OUTBOX_CRASH_POINTS: 'consumer.after-lmove' } });
    assert.equal(crashed.signal, 'SIGKILL');
    assert.equal(await h.client.llen('outbox.events:processing:cli'), 10);
    assert.equal(await h.client.hlen('processed'), 0);
    assert.deepEqual(await h.client.keys('outbox:seen:*'), []);

    const result = await h.cli('consume', '--batch-size', '10');
    assert.match(result.stdout, new RegExp(`received ${events} \\(10 recovered from outbox\\.events:processing:cli\\): applied ${events}, duplicates skipped 0`));
    await assertAppliedExactlyOnce(events);
    await o.verify();
  });

  it('a consumer killed right after an apply loses nothing and applies nothing twice', async () => {
    const events = await seedEvents(30);
    const crashed = await runCli(['consume', '--batch-size', '10'], { ...h.env, env: { OUTBOX_CRASH_POINTS: 'consumer.after-apply' } });
    assert.equal(crashed.signal, 'SIGKILL');
    assert.match(crashed.stderr, /crash point consumer\.after-apply/);
    // At most two rounds of --batch-size are in flight when the first one's answer arrives.
    const applied = await h.client.hlen('processed');
    assert.ok(applied >= 1 && applied <= 20, `applied ${applied}`);
    await h.cli('consume', '--batch-size', '10');
    await assertAppliedExactlyOnce(events);
    await o.verify();
  });

  it('a re-sent apply (reply lost, command replayed) is a no-op', async () => {
    const connection = await connectRedis(h.env.redisUrl);
    try {
      const consumer = createConsumerEngine(connection, { consumerId: 'replay', handler: (events) => runRedisHandlers(handlers, events) });
      const raw = message(1, 1);
      await connection.rpush(consumer.processingList, raw);
      const send = async () => (await (await consumer.sendRound([Buffer.from(raw)], emptyStats())).answered)[0].outcome;
      assert.equal(await send(), 'applied');
      assert.equal(await send(), 'stale');
      assert.equal(await h.client.hget('inventory:reserved', 'SKU-X'), '1');
      assert.equal(await h.client.hget('outbox:stats', 'applied'), '1');
    } finally {
      connection.disconnect();
    }
  });
});

describe('crashes at any instant (the SET NX crash window)', () => {
  it('SIGKILLing the consumer mid-drain, again and again, never skips or doubles an event', async () => {
    const events = await seedEvents(10_000);
    for (const fraction of [0.1, 0.35, 0.6, 0.85]) {
      const { child, done } = startCli(['consume', '--batch-size', '20'], h.env);
      await waitFor(async () => (await h.client.hlen('processed')) >= events * fraction, { timeoutMs: 30_000, intervalMs: 2 });
      child.kill('SIGKILL');
      const result = await done;
      assert.equal(result.signal, 'SIGKILL', `the consumer finished before the kill at ${fraction}`);
      assert.ok((await h.client.hlen('processed')) < events);
    }
    await h.cli('consume', '--batch-size', '20');
    await assertAppliedExactlyOnce(events);
    await o.verify();
  });

  it('SIGKILLing redis-server (AOF, fsync always) mid-drain loses nothing once it is back', async () => {
    const durable = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always']);
    const saved = { env: h.env, client: h.client };
    h.env = { ...h.env, redisUrl: durable.url };
    h.client = testClient(durable.url);
    try {
      const events = await seedEvents(5_000);
      const { done } = startCli(['consume', '--batch-size', '20'], h.env);
      await waitFor(async () => (await h.client.hlen('processed')) >= events * 0.3, { timeoutMs: 30_000, intervalMs: 2 });
      await durable.stop('SIGKILL');
      const died = await done;
      assert.equal(died.code, 5);
      assert.match(died.stderr, /^outbox: lost the connection to Redis/);
      await durable.resume();
      await h.cli('consume', '--batch-size', '20');
      await assertAppliedExactlyOnce(events);
    } finally {
      h.client.disconnect();
      Object.assign(h, saved);
      await durable.destroy();
    }
  });
});
