import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { sqliteVerifyReads } from '../shared/operations/verify/observe.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { useHarness } from './helpers/harness.js';
import { readDb } from './helpers/stores.js';
import { runCli, startScript, type CliResult } from './helpers/cli.js';
import { inboxChecks } from '../shared/operations/verify/inbox-checks.js';
import { monitorWhile } from './helpers/redis-monitor.js';

const h = useHarness();
const FIXTURE = fileURLToPath(new URL('./fixtures/database-consumer.js', import.meta.url));

/** Runs the database-mode consumer fixture (a real process) on `<dir>/consumer.db` until it drains or dies. */
function runConsumer(env: Record<string, string> = {}): Promise<CliResult> {
  return startScript(FIXTURE, [consumerDb()], { REDIS_URL: h.env.redisUrl, ...env }).done;
}

function statsOf(result: CliResult): Record<string, number> {
  assert.equal(result.code, 0, result.stderr);
  assert.doesNotMatch(result.stderr, /problem:/);
  return JSON.parse(result.stdout.trim().split('\n').at(-1)!);
}

const consumerDb = () => join(h.env.dir, 'consumer.db');

function query<T>(sql: string): T[] {
  const db = new Database(consumerDb(), { readonly: true, fileMustExist: true });
  try {
    return db.prepare(sql).all() as T[];
  } finally {
    db.close();
  }
}

/**
 * Places `orders` orders, ten at a time, and right after each ten changes the quantity of every
 * second (every sixth twice) and cancels every fifth, so that an aggregate's events sit close
 * together in the queue (in the same round: the waves), then relays them. Resolves the number of events.
 */
async function seedEvents(orders: number): Promise<number> {
  const db = openDatabase(h.env.dir);
  const connection = await connectRedis(h.env.redisUrl);
  try {
    const service = createOrderService(db);
    let events = 0;
    for (let i = 0; i < orders; i += 10) {
      const placed = service.placeOrders(Array.from({ length: Math.min(10, orders - i) }, (_, j) => ({ sku: `SKU-${(i + j) % 4}`, qty: 1 + ((i + j) % 3) })));
      events += placed.length;
      for (const { order } of placed) {
        if (order.id % 2 === 0) (service.changeQty(order.id, 5), (events += 1));
        if (order.id % 6 === 0) (service.changeQty(order.id, 2), (events += 1));
        if (order.id % 5 === 0) (service.cancelOrder(order.id), (events += 1));
      }
    }
    await createRelay(db, connection).relayAll();
    return events;
  } finally {
    db.close();
    connection.disconnect();
  }
}

function expectedReserved(): Record<string, number> {
  const db = readDb(h.env.dir);
  try {
    const rows = db.prepare("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku").all() as { sku: string; qty: number }[];
    return Object.fromEntries(rows.map((r) => [r.sku, r.qty]));
  } finally {
    db.close();
  }
}

/** What must hold once the consumer drained, whatever crashed before: every event's effect in the consumer database exactly once, in order. */
async function assertEffectsExactlyOnce(events: number) {
  const inbox = query<{ event_id: string }>('SELECT event_id FROM outbox_inbox').map((r) => r.event_id);
  assert.equal(inbox.length, events, 'one inbox row per unique event');
  assert.equal(query('SELECT event_id FROM ledger').length, events, 'one ledger row per unique event');
  const ledger = query<{ sku: string; qty: number }>('SELECT sku, SUM(delta) AS qty FROM ledger GROUP BY sku HAVING qty != 0');
  assert.deepEqual(Object.fromEntries(ledger.map((r) => [r.sku, r.qty])), expectedReserved());
  const reserved = query<{ sku: string; qty: number }>('SELECT sku, qty FROM reserved WHERE qty != 0');
  assert.deepEqual(Object.fromEntries(reserved.map((r) => [r.sku, r.qty])), expectedReserved());
  assert.deepEqual(query('SELECT * FROM out_of_order'), [], 'every aggregate saw its events in seq order');

  assert.equal(await h.client.hlen('processed'), events);
  assert.deepEqual((await h.client.hkeys('processed')).sort(), [...inbox].sort(), 'processed and the inbox name the same events');
  assert.deepEqual([...new Set(await h.client.hvals('outbox:apply-count'))], ['1']);
  assert.equal(await h.client.llen('outbox.events'), 0);
  assert.equal(await h.client.llen('outbox.events:processing:db'), 0);
  assert.equal(await h.client.hlen('outbox.events:parked'), 0);
  assert.equal(await h.client.llen('outbox.events:dead'), 0);
  assert.equal(await h.client.hget('outbox:stats', 'applied'), String(events));
  // The effect lives in the consumer's database only.
  assert.equal(await h.client.exists('inventory:reserved'), 0);
}

/** The events claimed by a dead process: marker key -> ms left of its lease. */
async function claimsLeft(): Promise<Map<string, number>> {
  const claims = new Map<string, number>();
  for (const key of await h.client.keys('outbox:seen:*')) {
    if ((await h.client.get(key))?.startsWith('claim:')) claims.set(key.slice('outbox:seen:'.length), await h.client.pttl(key));
  }
  return claims;
}

describe('database mode: effects in the consumer’s own SQLite, with an inbox', () => {
  it('applies every event once, in seq order per aggregate, several events of an aggregate in one round', async () => {
    const events = await seedEvents(60);
    const stats = statsOf(await runConsumer({ LANES: '3' }));
    assert.equal(stats.applied, events);
    assert.equal(stats.received, events);
    assert.equal(stats.parked, 0, 'waves claim an aggregate’s next event only after the previous one completed');
    await assertEffectsExactlyOnce(events);

    const again = statsOf(await runConsumer());
    assert.equal(again.received, 0);

    // With --consumer-db the orders lab's Redis inventory (which database mode does not write) is not checked; the inbox rows are.
    const verify = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb()], h.env);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /processed events without an inbox row \(effect missing from the consumer database\) +0 +0 +ok/);
    assert.match(verify.stdout, new RegExp(`inbox rows / of them committed, completion pending +- +${events} / 0 +info`));
    const missing = await runCli(['verify', '--consumer-db', join(h.env.dir, 'nothing.db')], h.env);
    assert.equal(missing.code, 5);
    assert.match(missing.stderr, /^outbox: no consumer database at .*nothing\.db \(--consumer-db\): if the database-mode consumer's file was lost, stop the consumers and rebuild it from the store with "outbox verify --repair --consumer-db .*nothing\.db"; otherwise pass the file it writes\n$/);
    const foreign = await runCli(['verify', '--consumer-db', join(h.env.dir, 'app.db')], h.env);
    assert.equal(foreign.code, 5);
    assert.match(foreign.stderr, /^outbox: --consumer-db .*app\.db is not a consumer database with an inbox \(no such table: outbox_inbox\): pass the file the database-mode consumer writes\n$/);
  });

  it('a relay duplicate, in the same round or redelivered later, is acked without running the handler again', async () => {
    const events = await seedEvents(10);
    const [first] = await h.client.lrange('outbox.events', 0, 0);
    // As a relay killed between push and mark leaves it: the same message twice in the queue.
    await h.client.rpush('outbox.events', first);
    const stats = statsOf(await runConsumer());
    assert.equal(stats.applied, events);
    assert.equal(stats.duplicates, 1);
    await h.client.rpush('outbox.events', first);
    const again = statsOf(await runConsumer());
    assert.equal(again.duplicates, 1);
    assert.equal(again.applied, 0);
    await assertEffectsExactlyOnce(events);
  });

  it('an aggregate\'s later events queued before its first: parked, then released together once the first completes, and applied in seq order, each once', async () => {
    const events = await seedEvents(30);
    // Order 30's events (placed, two quantity changes, cancelled): every one after the first moved
    // to the head of the queue, the first to its tail.
    const queued = await h.client.lrange('outbox.events', 0, -1);
    const chain = queued.filter((m) => /^(order:)?30$/.test(String(JSON.parse(m).aggregate_id))).sort((a, b) => JSON.parse(a).seq - JSON.parse(b).seq);
    assert.equal(chain.length, 4, `order 30's events: ${chain.join(', ')}`);
    for (const message of chain) await h.client.lrem('outbox.events', 1, message);
    await h.client.lpush('outbox.events', ...chain.slice(1).reverse());
    await h.client.rpush('outbox.events', chain[0]);
    // Each re-queue of parked events Redis runs (inside the complete script): how many messages it pushes.
    const requeued: number[] = [];
    const stats = statsOf(
      await monitorWhile(h.env.redisUrl, (args) => {
        if (args[0]?.toLowerCase() === 'lpush' && args[1] === 'outbox.events') requeued.push(args.length - 2);
      }, () => runConsumer({ LANES: '3' })),
    );
    assert.deepEqual(requeued, [3], 'the three parked events went back in one push');
    assert.equal(stats.applied, events);
    assert.equal(stats.parked, 3);
    assert.equal(await h.client.hget('outbox:stats', 'unparked'), '3');
    await assertEffectsExactlyOnce(events);
  });

  it('a handler that throws is rolled back and retried: its writes land once', async () => {
    const events = await seedEvents(10);
    const ids = (await h.client.lrange('outbox.events', 0, -1)).map((raw) => JSON.parse(raw).event_id as string);
    const stats = statsOf(await runConsumer({ FAIL_ONCE: [ids[0], ids[7]].join(',') }));
    assert.equal(stats.retried, 2);
    assert.equal(stats.applied, events);
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), '2');
    await assertEffectsExactlyOnce(events);
  });

  it('poison is dead-lettered at once with the reason, its writes rolled back: no handler for the type, a PoisonEventError', async () => {
    await seedEvents(10);
    const raws = await h.client.lrange('outbox.events', 0, -1);
    const messages = raws.map((raw) => JSON.parse(raw) as { event_id: string; event_type: string });
    const cancelled = messages.filter((m) => m.event_type === 'OrderCancelled');
    const poisoned = messages.find((m) => m.event_type === 'OrderPlaced' && m.event_id)!;
    assert.ok(cancelled.length > 0);
    const stats = statsOf(await runConsumer({ NO_HANDLER: 'OrderCancelled', POISON: poisoned.event_id }));
    assert.equal(stats.retried, 0);
    const dead = (await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry) as { reason: string; message: string });
    const reasons = new Map(dead.map((d) => [JSON.parse(d.message).event_id as string, d.reason]));
    for (const m of cancelled) assert.equal(reasons.get(m.event_id), 'no handler for event type "OrderCancelled"');
    assert.equal(reasons.get(poisoned.event_id), `${poisoned.event_id} cannot be handled`);
    assert.equal(dead.length, cancelled.length + 1);
    const inbox = new Set(query<{ event_id: string }>('SELECT event_id FROM outbox_inbox').map((r) => r.event_id));
    assert.ok(!inbox.has(poisoned.event_id));
    assert.deepEqual(query(`SELECT * FROM ledger WHERE event_id = '${poisoned.event_id}'`), [], 'the poisoned handler’s writes were rolled back');
    assert.equal(await h.client.llen('outbox.events:processing:db'), 0);
  });

  for (const point of ['consumer.after-claim', 'consumer.after-commit', 'consumer.after-processed'] as const) {
    it(`a consumer killed at ${point} loses nothing and applies nothing twice after a restart`, async () => {
      const events = await seedEvents(40);
      const crashed = await runConsumer({ OUTBOX_CRASH_POINTS: point, BATCH_SIZE: '10', LEASE_MS: '1500' });
      assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
      assert.match(crashed.stderr, new RegExp(`crash point ${point.replace('.', '\\.')}`));
      const inbox = query('SELECT event_id FROM outbox_inbox').length;
      const processed = await h.client.hlen('processed');
      const claims = await claimsLeft();
      if (point === 'consumer.after-claim') {
        // Claimed, not handled: nothing in the consumer database, the claims held by the dead process.
        assert.equal(inbox, processed);
        assert.ok(claims.size > 0);
      } else if (point === 'consumer.after-commit') {
        // Committed, Redis not told: the inbox is ahead of processed by what the dead process committed.
        assert.ok(inbox > processed, `inbox ${inbox}, processed ${processed}`);
        assert.equal(claims.size, inbox - processed);
      } else {
        assert.equal(inbox, processed);
        assert.equal(claims.size, 0);
      }
      assert.ok(processed < events);

      // Whether the restart still finds the dead process's claims depends on how fast it starts: the
      // lease test below checks that they hold; here, only the outcome.
      statsOf(await runConsumer({ BATCH_SIZE: '10' }));
      await assertEffectsExactlyOnce(events);
    });
  }

  it('the inbox check: in flight after a crash past the commit, ok once completed, FAIL for a processed event without its inbox row', async () => {
    const events = await seedEvents(20);
    const crashed = await runConsumer({ OUTBOX_CRASH_POINTS: 'consumer.after-commit', LEASE_MS: '500' });
    assert.equal(crashed.signal, 'SIGKILL');
    const judge = async () => {
      const db = new Database(consumerDb());
      const store = openDatabase(h.env.dir);
      try {
        return (await inboxChecks(db, h.client, sqliteVerifyReads(store))).map((c) => [c.actual, c.status]);
      } finally {
        db.close();
        store.close();
      }
    };
    const committed = query('SELECT event_id FROM outbox_inbox').length;
    assert.deepEqual(await judge(), [['0', 'ok'], ['0', 'ok'], [`${committed} / ${committed - (await h.client.hlen('processed'))}`, 'info']]);
    statsOf(await runConsumer());
    assert.deepEqual(await judge(), [['0', 'ok'], ['0', 'ok'], [`${events} / 0`, 'info']]);

    const db = new Database(consumerDb());
    db.prepare('DELETE FROM outbox_inbox WHERE rowid = (SELECT MIN(rowid) FROM outbox_inbox)').run();
    db.close();
    assert.deepEqual(await judge(), [['1', 'FAIL'], ['0', 'ok'], [`${events - 1} / 0`, 'info']]);
  });

  it('a claim whose process died is retried once its lease runs out, not before', async () => {
    const events = await seedEvents(20);
    const crashed = await runConsumer({ OUTBOX_CRASH_POINTS: 'consumer.after-claim', LEASE_MS: '3000' });
    assert.equal(crashed.signal, 'SIGKILL');
    const claims = await claimsLeft();
    assert.ok(claims.size > 0);
    const leaseEndsAt = Date.now() + Math.min(...claims.values());

    const stats = statsOf(await runConsumer());
    // A restart that came up within the lease found the claims held (a very slow one finds them gone).
    if (stats.busy === 0) assert.ok(Date.now() >= leaseEndsAt);
    else assert.ok(stats.busy >= claims.size, `busy ${stats.busy}, claims ${claims.size}`);
    // The inbox rows of the claimed events were written after their lease ran out (same machine, same clock).
    const appliedAt = query<{ event_id: string; applied_at: number }>('SELECT event_id, applied_at FROM outbox_inbox');
    for (const { event_id, applied_at } of appliedAt) {
      if (claims.has(event_id)) assert.ok(applied_at >= leaseEndsAt - 5, `${event_id} applied ${leaseEndsAt - applied_at} ms before its lease ended`);
    }
    await assertEffectsExactlyOnce(events);
  });
});
