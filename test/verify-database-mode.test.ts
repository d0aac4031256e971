import assert from 'node:assert/strict';
import { copyFileSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { orderDatabaseHandlers, reservedInDatabase } from '../shared/lab/orders/order-database-handlers.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { createConsumerDatabase } from '../shared/outbox/consumer/inbox/consumer-database.js';
import { useHarness } from './helpers/harness.js';
import { readDb } from './helpers/stores.js';
import { runCli } from './helpers/cli.js';
import { prune } from '../shared/operations/prune/prune.js';
import { inboxChecks } from '../shared/operations/verify/inbox-checks.js';
import { sqliteVerifyReads } from '../shared/operations/verify/observe.js';
import { orders } from './helpers/orders.js';
import { dropAllGuards, guardOf, guardsOf } from './helpers/guards.js';

const h = useHarness();
/** The relay and consume steps before a test's subject, in this process (helpers/orders.ts). */
const o = orders(() => h.env);
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
  // Created the first time, as a setup step does: the consumer never creates it (issue 30).
  if (!existsSync(consumerDb())) createConsumerDatabase(consumerDb()).close();
  const consumer = await createConsumer({ redis, handlers: orderDatabaseHandlers, database: consumerDb(), consumerId: 'db' });
  try {
    return (await consumer.drain()).applied;
  } finally {
    await consumer.close();
    redis.disconnect();
  }
}

/** Copies a backup over a database file, its WAL and shared-memory files gone first (nothing has it open). */
function restoreFile(backup: string, file: string): void {
  for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
  copyFileSync(backup, file);
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

  it('app.db restored from an older backup while the consumer database kept going: the inbox rows of the lost events fail verify, and with the consumer database restored from the same backup time --repair ends VERIFY OK', async () => {
    await seedLabEvents(6);
    await drainInDatabaseMode();
    // Both backups at one quiet moment, as docs/recovery.md asks.
    for (const [file, copy] of [[join(h.env.dir, 'app.db'), 'app.backup'], [consumerDb(), 'consumer.backup']]) {
      const live = new Database(file);
      await live.backup(join(h.env.dir, copy));
      live.close();
    }
    // Events the store's backup does not hold, applied in the consumer database: a change and an order.
    const db = openDatabase(h.env.dir);
    const service = createOrderService(db);
    service.changeQty(2, 9);
    const lostOrder = service.placeOrder({ sku: 'SKU-9', qty: 5 }).order.id;
    db.close();
    await o.relay();
    assert.equal(await drainInDatabaseMode(), 2);
    restoreFile(join(h.env.dir, 'app.backup'), join(h.env.dir, 'app.db'));

    const found = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(found.code, 1, found.stdout + found.stderr);
    assert.match(found.stdout, /^the store is not behind Redis +yes +no +FAIL/m);
    assert.match(found.stdout, /^inbox rows of events the store does not hold \(effects of a lost history\) +0 +2 +FAIL\n  e\.g\. \S+ \(order:2 seq 2\), \S+ \(order:\d+ seq 1\), the consumer database holds effects of events the store no longer holds.*restore it from a backup taken with the store/m);
    assert.ok(found.stdout.includes(`order:${lostOrder} seq 1`), found.stdout);

    // The consumer database restored from its backup of the same moment, then Redis rebuilt from the store.
    restoreFile(join(h.env.dir, 'consumer.backup'), consumerDb());
    const repaired = await runCli(['verify', '--repair', '--yes', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.match(repaired.stdout, /^repair: deleted \d+ Redis key\(s\) of this project$/m, repaired.stdout + repaired.stderr);
    await drainInDatabaseMode();
    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    const consumer = new Database(consumerDb(), { readonly: true });
    try {
      const reserved = reservedInDatabase(consumer);
      for (const [sku, qty] of liveReservations()) assert.equal(reserved.get(sku), qty, sku);
      assert.equal(reserved.get('SKU-9') ?? 0, 0, 'the lost order reserves nothing');
    } finally {
      consumer.close();
    }
  });

  it('--repair after a restored app.db leaves the consumer database as it was: its effects of the lost events keep verify failing', async () => {
    await seedLabEvents(4);
    await drainInDatabaseMode();
    const live = new Database(join(h.env.dir, 'app.db'));
    await live.backup(join(h.env.dir, 'app.backup'));
    live.close();
    const db = openDatabase(h.env.dir);
    createOrderService(db).changeQty(2, 9);
    db.close();
    await o.relay();
    assert.equal(await drainInDatabaseMode(), 1);
    restoreFile(join(h.env.dir, 'app.backup'), join(h.env.dir, 'app.db'));
    const plan = await runCli(['verify', '--repair', '--dry-run', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.match(plan.stdout, /^verify --repair would delete this project's keys in Redis.*; the consumer database \(--consumer-db\) is not changed: restore it first from a backup taken with the store's, or its effects of the lost events stay$/m);
    await runCli(['verify', '--repair', '--yes', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    await drainInDatabaseMode();
    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 1, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /^the store is not behind Redis +yes +yes +ok$/m);
    assert.match(verify.stdout, /^inbox rows of events the store does not hold \(effects of a lost history\) +0 +1 +FAIL\n  e\.g\. \S+ \(order:2 seq 2\)/m);
    assert.match(verify.stdout, /^VERIFY FAILED: 1 invariant broken$/m);
  });

  it('after a prune and a Redis loss the pruned events\' effects are still in the consumer database (their inbox rows): verify passes, and fails once one of those rows is gone', async () => {
    const events = await seedLabEvents(6);
    assert.equal(await drainInDatabaseMode(), events);
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, new RegExp(`^pruned ${events} PUBLISHED row`, 'm'));
    await h.client.flushall();
    // The relay rebuilds Redis from the store: nothing left to republish, every pruned event counted as unrecoverable by Redis.
    assert.match((await h.cli('relay')).stdout, /Redis lost its state/);
    const db = openDatabase(h.env.dir);
    createOrderService(db).placeOrder({ sku: 'SKU-0', qty: 1 });
    db.close();
    await o.relay();
    assert.equal(await drainInDatabaseMode(), 1);

    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /^pruned events without an inbox row \(effects lost\) +0 +0 +ok$/m);
    assert.match(verify.stdout, /^processed_unique = outbox rows \+ pruned - pruned whose record Redis lost +1 +1 +ok$/m);
    assert.match(verify.stdout, new RegExp(`^inbox rows / of them committed, completion pending +- +${events + 1} / 0 +info$`, 'm'));

    const consumer = new Database(consumerDb());
    const gone = consumer.prepare("SELECT aggregate_id FROM outbox_inbox WHERE aggregate_id != 'order:7' LIMIT 1").pluck().get() as string;
    consumer.prepare('DELETE FROM outbox_inbox WHERE rowid = (SELECT MIN(rowid) FROM outbox_inbox WHERE aggregate_id = ?)').run(gone);
    consumer.close();
    const short = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(short.code, 1, short.stdout + short.stderr);
    assert.match(short.stdout, new RegExp(`^pruned events without an inbox row \\(effects lost\\) +0 +1 +FAIL\n  e\\.g\\. ${gone}: 1 of its \\d+ pruned event\\(s\\) without an inbox row$`, 'm'));
  });

  it('the inbox check with a prune between its look-ups: an aggregate pruned again after its first rows were looked up is pruned, not a lost history', async () => {
    const db = openDatabase(h.env.dir);
    const redis = await connectRedis(h.env.redisUrl);
    try {
      // Order 1's seq 1 first and its seq 2 last: their inbox rows fall in the check's first and last look-up.
      const service = createOrderService(db);
      service.placeOrder({ sku: 'SKU-0', qty: 1 });
      service.placeOrders(Array.from({ length: 1200 }, () => ({ sku: 'SKU-1', qty: 1 })));
      service.changeQty(1, 2);
      await createRelay(db, redis).relayAll();
      assert.equal(await drainInDatabaseMode(), 1202);
      // Order 1's seq 1 pruned before the check, the rest while it runs.
      assert.equal((await prune(db, redis, 0, { throughId: 1 })).deleted, 1);
      const reads = sqliteVerifyReads(db);
      let lookUps = 0;
      const pruningMeanwhile = {
        history: reads.history,
        async heldOf(ids: string[]) {
          // Between the first look-up (and whatever the check read after it) and the second.
          if ((lookUps += 1) === 2) assert.equal((await prune(db, redis, 0)).deleted, 1201);
          return reads.heldOf(ids);
        },
      };
      const consumer = new Database(consumerDb(), { readonly: true });
      try {
        const checks = await inboxChecks(consumer, redis, pruningMeanwhile);
        assert.ok(lookUps > 1, 'the check looked up its rows in several chunks');
        assert.deepEqual(
          checks.map((c) => [c.name, c.actual]),
          [
            ['processed events without an inbox row (effect missing from the consumer database)', '0'],
            ['inbox rows of events the store does not hold (effects of a lost history)', '0'],
            ['inbox rows / of them committed, completion pending', '1202 / 0'],
          ],
        );
      } finally {
        consumer.close();
      }
    } finally {
      db.close();
      redis.disconnect();
    }
  });

  it('an app.db that lost a row the database-mode consumer applied (a cut like a PostgreSQL dump\'s), its seq then taken by the store\'s next event: the consumer skips that event and records it, and the relay and status see the store behind', async () => {
    const db = openDatabase(h.env.dir);
    const service = createOrderService(db);
    service.placeOrder({ sku: 'SKU-A', qty: 2 });
    service.changeQty(1, 5);
    service.placeOrder({ sku: 'SKU-B', qty: 1 });
    db.close();
    // Rows 1 to 3 in one push: the meta hash records row 3 as the highest and the latest push's last.
    assert.match((await h.cli('relay')).stdout, /^relayed 3 events in 1 batch/m);
    assert.equal(await drainInDatabaseMode(), 3);

    // The cut: row 2 (order:1 seq 2) gone, rows 1 and 3 kept, the store's seq of order:1 back at 1.
    const cut = openDatabase(h.env.dir);
    cut.prepare('DELETE FROM outbox WHERE id = 2').run();
    cut.prepare("UPDATE outbox_aggregates SET last_seq = 1 WHERE aggregate_id = 'order:1'").run();
    cut.prepare('UPDATE orders SET qty = 2 WHERE id = 1').run();
    // order:1 seq 2 again, another event.
    const { eventId } = createOrderService(cut).changeQty(1, 7);
    cut.close();
    // The rows the meta hash records are there: the relay's check passes, and the consumer skips the event.
    assert.match((await h.cli('relay')).stdout, /^relayed 1 event/m);
    assert.equal(await drainInDatabaseMode(), 0);
    assert.equal(await h.client.llen('outbox.events'), 0);

    assert.deepEqual(await h.client.hmget('outbox:meta', 'takenEvent', 'takenAggregate', 'takenSeq'), [eventId, 'order:1', '2']);
    const relay = await runCli(['relay'], h.env);
    assert.equal(relay.code, 5, relay.stdout + relay.stderr);
    assert.match(relay.stderr, new RegExp(`app\\.db is behind Redis at \\S+: Redis applied another event at order:1 seq 2, and \\S+ holds ${eventId} there `));
    assert.match((await h.cli('status')).stdout, /^store +\S+: WARN the store is behind Redis: Redis applied another event at order:1 seq 2/m);
    const found = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(found.code, 1, found.stdout + found.stderr);
    assert.match(found.stdout, new RegExp(`^the store is not behind Redis +yes +no +FAIL\n  e\\.g\\. .*order:1 seq 2: Redis applied another event at that seq, which the store no longer holds, so ${eventId} would be skipped as its duplicate `, 'm'));
    assert.match(found.stdout, /^inbox rows of events the store does not hold \(effects of a lost history\) +0 +1 +FAIL\n  e\.g\. \S+ \(order:1 seq 2\)/m);
  });

  it('a redelivered event that was completed (its apply count kept) but lost its processed entry and marker is a plain duplicate, not a taken seq', async () => {
    await seedLabEvents(3);
    const queued = await h.client.lrange('outbox.events', 0, -1);
    await drainInDatabaseMode();
    const id = (JSON.parse(queued[0]) as { event_id: string }).event_id;
    assert.equal(await h.client.hexists('outbox:apply-count', id), 1);
    await h.client.hdel('processed', id);
    await h.client.del(`outbox:seen:${id}`);
    await h.client.rpush('outbox.events', queued[0]);
    assert.equal(await drainInDatabaseMode(), 0);
    assert.equal(await h.client.llen('outbox.events'), 0);
    assert.equal(await h.client.hexists('outbox:meta', 'takenEvent'), 0);
    assert.match((await h.cli('relay')).stdout, /^relayed 0 events/m);
  });

  it('the applied seqs lost alone, then the completed events delivered again: the claim of each duplicate whose processed entry shows it completed puts the seq guard back and releases the event parked behind it', async () => {
    // Order 3 (the lab's third) is placed and changed: seqs 1 and 2.
    await seedLabEvents(3);
    const queued = await h.client.lrange('outbox.events', 0, -1);
    const order3 = queued.filter((m) => (JSON.parse(m) as { aggregate_id: string }).aggregate_id === 'order:3');
    assert.equal(order3.length, 2, 'order 3 has two events, seqs 1 and 2');
    await drainInDatabaseMode();
    await dropAllGuards(h.client);
    // Its seq 3 parks: with the guard lost, the claim expects seq 1.
    o.changeQty(3, 5);
    await o.relay();
    assert.equal(await drainInDatabaseMode(), 0);
    assert.deepEqual(await h.client.hkeys('outbox.events:parked'), ['order:3:3']);
    // Every completed event delivered again: duplicates, each aggregate's guard put back (order 3's
    // at 2), and order 3's seq 3 released and completed.
    await h.client.rpush('outbox.events', ...queued);
    assert.equal(await drainInDatabaseMode(), 1);
    assert.equal(await guardOf(h.client, 'order:3'), '3');
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    assert.equal(await h.client.hget('outbox:stats', 'unparked'), '1');
    const db = new Database(consumerDb(), { readonly: true });
    try {
      assert.equal(db.prepare<[], { n: number }>("SELECT COUNT(*) AS n FROM outbox_inbox WHERE aggregate_id = 'order:3'").get()!.n, 3);
    } finally {
      db.close();
    }
    assert.match((await h.cli('verify', '--settle', '0s', '--consumer-db', consumerDb())).stdout, /^VERIFY OK$/m);
  });

  it('the applied seqs lost after a prune of every event: the last pruned event\'s processed entry (aggregateId, as database mode writes it) shows them completed, and --repair raises the seq, releasing the parked event', async () => {
    await seedLabEvents(3);
    await drainInDatabaseMode();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 6 PUBLISHED row/m);
    await dropAllGuards(h.client);
    o.changeQty(3, 5);
    await o.relay();
    assert.equal(await drainInDatabaseMode(), 0);
    const broken = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(broken.code, 1, broken.stdout + broken.stderr);
    assert.match(broken.stdout, /^aggregates whose applied seq != last seq +0 +3 +FAIL\n +e\.g\. order:1: applied seq 0 in Redis, its events applied through seq 3 /m);
    assert.match(
      (await h.cli('verify', '--repair', '--yes', '--settle', '0s', '--consumer-db', consumerDb())).stdout,
      /^repair: 3 aggregate\(s\) given back the applied seq their processed entries show; 1 parked event\(s\) queued again$/m,
    );
    assert.equal(await drainInDatabaseMode(), 1);
    assert.deepEqual(await guardsOf(h.client), { 'order:1': '3', 'order:2': '1', 'order:3': '3' });
    assert.match((await h.cli('verify', '--settle', '0s', '--consumer-db', consumerDb())).stdout, /^VERIFY OK$/m);
  });

  it('Redis mode is unchanged: the inventory is checked, and a wrong one fails', async () => {
    await seedLabEvents(6);
    await o.consume();
    const verify = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /SKUs whose reserved qty != live orders +0 +0 +ok/);

    await h.client.hincrby('inventory:reserved', 'SKU-0', 1);
    const wrong = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stdout, /SKUs whose reserved qty != live orders +0 +1 +FAIL/);
  });
});
