import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { beforeEach, describe, it } from 'node:test';
import { createPgOrderService } from '../shared/lab/orders/pg-order-service.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { startApp, stopApp, stopApps, type App } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { usePostgres } from './helpers/postgres.js';
import { orders } from './helpers/orders.js';
import { pgAttachedApps } from '../shared/runtime/pg-attached-apps.js';
import { guardsOf } from './helpers/guards.js';

// The relay app on the PostgreSQL store: several at once, no BullMQ job between them.
const db = usePostgres();
const h = useHarness({ init: false });
const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';
const PRODUCER = 'dist/apps/producer/main.js';

beforeEach(async () => {
  await db.reset();
  await db.scalar('DROP TABLE IF EXISTS orders');
});

const pgEnv = () => ({ OUTBOX_DATABASE_URL: db.url });
/** The steps before a test's subject, in this process (helpers/orders.ts). */
const o = orders(() => ({ ...h.env, env: pgEnv() }));

async function cli(...args: string[]) {
  const result = await runCli(args, { ...h.env, env: pgEnv() });
  assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
  return result;
}

/**
 * Order writers on `writers` connections at once: each places its orders, changes their qty many
 * times (at least `changesEach`, and on until `until` is aborted), then cancels its first.
 */
async function traffic(writers: number, ordersEach: number, changesEach: number, until?: AbortSignal): Promise<void> {
  const service = await createPgOrderService(db.pool(writers));
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      const ids = [];
      for (let i = 0; i < ordersEach; i += 1) ids.push((await service.placeOrder({ sku: `SKU-${(w + i) % 3}`, qty: 1 })).order.id);
      for (let i = 0; i < changesEach || (until !== undefined && !until.aborted); i += 1) {
        const id = ids[i % ids.length];
        const order = (await service.getOrder(id))!;
        await service.changeQty(id, order.qty + 1);
      }
      await service.cancelOrder(ids[0]);
    }),
  );
}

describe('the relay app on PostgreSQL', () => {
  it('two relay apps and a consumer app under traffic from 4 connections: both relay, verify is green during and after, every event applied once, in seq order per order', async () => {
    await o.init();
    const relays: App[] = [1, 2].map(() => startApp(h.env, RELAY, [], { ...pgEnv(), OUTBOX_LOG_LEVEL: 'debug', OUTBOX_RELAY_BATCH_SIZE: '7', OUTBOX_RELAY_POLL: '2ms' }));
    const consumer = startApp(h.env, CONSUMER);
    const rowCount = async () => Number(await db.scalar('SELECT COUNT(*) FROM outbox'));
    let total: number;
    try {
      for (const app of [...relays, consumer]) await waitFor(() => /"msg":"(relay|consumer) started"/.test(app.output()), { message: app.output() });
      const stop = new AbortController();
      const writing = traffic(4, 5, 60, stop.signal);
      // Under traffic: verify's REPEATABLE READ snapshot makes what is in flight look in flight.
      await waitFor(async () => (await rowCount()) > 50, { timeoutMs: 20_000 });
      const before = await rowCount();
      const during = await runCli(['verify'], { ...h.env, env: pgEnv() });
      const after = await rowCount();
      stop.abort();
      await writing;
      assert.equal(during.code, 0, during.stdout + during.stderr);
      assert.match(during.stdout, /^VERIFY OK$/m);
      assert.ok(after > before + 20, `traffic ran while verify did (${before} rows before, ${after} after)`);
      total = await rowCount();
      await waitFor(async () => (await h.client.hlen('processed')) === total, { timeoutMs: 30_000, message: 'not every event applied' });
      for (const relay of relays) assert.match(relay.output(), /"msg":"batch relayed"/, 'each relay relayed batches');
      await o.verify('0s');
    } finally {
      await stopApps([...relays, consumer]);
    }
    for (const relay of relays) assert.doesNotMatch(relay.output(), /"level":"(warn|error)"/, relay.output());

    assert.equal(await h.client.hlen('processed'), Number(await db.scalar('SELECT COUNT(*) FROM outbox')));
    assert.deepEqual(new Set(Object.values(await h.client.hgetall('outbox:apply-count'))), new Set(['1']), 'no event applied twice');
    assert.equal(await h.client.hlen('outbox:parked'), 0);
    const lastSeqs = (await db.pool(1).query('SELECT aggregate_id, last_seq::int FROM outbox_aggregates')).rows;
    const applied = await guardsOf(h.client);
    for (const { aggregate_id, last_seq } of lastSeqs) assert.equal(Number(applied[aggregate_id]), last_seq, aggregate_id);
    // In seq order: per order, the apply order the consumer recorded rises with the seq.
    const events = (await db.pool(1).query('SELECT event_id, aggregate_id, seq::int FROM outbox ORDER BY aggregate_id, seq')).rows;
    const processed = await h.client.hmget('processed', ...events.map((e) => e.event_id));
    let previous = { aggregate: '', order: -1 };
    events.forEach((e, i) => {
      const order = (JSON.parse(processed[i]!) as { applyOrder: number }).applyOrder;
      if (e.aggregate_id === previous.aggregate) assert.ok(order > previous.order, `${e.aggregate_id} seq ${e.seq} applied before its predecessor`);
      previous = { aggregate: e.aggregate_id, order };
    });
    // The effects: reserved inventory per SKU = the live orders' quantities.
    const live = (await db.pool(1).query("SELECT sku, SUM(qty)::int AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku")).rows;
    const reserved = await h.client.hgetall('inventory:reserved');
    for (const { sku, qty } of live) assert.equal(Number(reserved[sku]), qty, sku);
  });

  it('refuses a bad OUTBOX_DATABASE_URL with exit 78, one line; waits for a database without the outbox tables and relays once init made them, healthy; init --force refuses while it runs (exit 4) and, with --ignore-attached, it relays for the new store', async () => {
    const bad = startApp(h.env, RELAY, [], { OUTBOX_DATABASE_URL: 'postgres//nope' });
    assert.equal((await bad.exited).code, 78, bad.output());
    assert.match(bad.output(), /"msg":"OUTBOX_DATABASE_URL must be a URL like postgres:/);
    assert.equal(bad.output().trim().split('\n').length, 1, bad.output());

    const healthPort = await freePort();
    const relay = startApp(h.env, RELAY, [], { ...pgEnv(), OUTBOX_RELAY_POLL: '2ms', OUTBOX_RELAY_HEALTH_PORT: String(healthPort) });
    try {
      await waitFor(() => /waiting for the PostgreSQL store: not relaying.*has no outbox tables/.test(relay.output()), { message: relay.output() });
      await cli('init');
      await cli('place-order', '--count', '3');
      await waitFor(async () => (await h.client.llen('outbox.events')) === 3, { timeoutMs: 10_000, message: relay.output() });
      const health = await fetch(`http://127.0.0.1:${healthPort}/healthz`);
      assert.equal(health.status, 200, await health.clone().text());
      const storeId = (await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'")) as string;
      assert.equal(((await health.json()) as { checks: { database: { storeId: string } } }).checks.database.storeId, storeId);
      // The running relay has the store open: init --force refuses (exit 4, one line) unless --ignore-attached.
      const refused = await runCli(['init', '--force'], { ...h.env, env: pgEnv() });
      assert.equal(refused.code, 4, refused.stdout + refused.stderr);
      assert.equal(
        refused.stderr,
        `outbox: outbox-relay ${hostname()} pid ${relay.child.pid} has PostgreSQL database ${db.name} open: stop them first: npx pm2 stop ecosystem.config.cjs, or pass --ignore-attached\n`,
      );
      assert.equal(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'"), storeId, 'nothing changed');
      // Recreated under the running relay: it relays for the new store, never claims Redis for the old one.
      await cli('init', '--force', '--ignore-attached');
      await cli('place-order', '--count', '2');
      const newStoreId = (await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'")) as string;
      await waitFor(async () => (await h.client.llen('outbox.events')) === 2, { timeoutMs: 10_000, message: relay.output() });
      assert.equal(await h.client.hget('outbox:meta', 'store'), newStoreId);
      assert.match((await cli('relay')).stdout, /^relayed 0 events/m);
    } finally {
      assert.equal((await stopApp(relay)).code, 0, relay.output());
    }
  });
});

describe('the producer app on PostgreSQL', () => {
  it('serves the order API with each write one pg transaction: the same answers as on app.db, and the events relay and verify', async () => {
    await o.init();
    const port = await freePort();
    const producer = startApp(h.env, PRODUCER, [], { ...pgEnv(), PORT: String(port) });
    const post = (path: string, body?: unknown) =>
      fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    try {
      await waitFor(() => /"msg":"producer listening"/.test(producer.output()), { message: producer.output() });
      const placed = await post('/orders', { sku: 'SKU-A', qty: 2 });
      assert.equal(placed.status, 201);
      assert.deepEqual({ ...(await placed.json()), eventId: 'e' }, { orderId: 1, sku: 'SKU-A', qty: 2, status: 'PLACED', eventId: 'e', eventType: 'OrderPlaced', seq: 1 });
      assert.equal((await post('/orders/1/qty', { qty: 5 })).status, 200);
      assert.equal((await post('/orders/1/cancel')).status, 200);
      const twice = await post('/orders/1/cancel');
      assert.equal(twice.status, 409);
      assert.deepEqual(await twice.json(), { error: 'order 1 is already cancelled: cannot cancel it' });
      assert.equal((await post('/orders/9/qty', { qty: 5 })).status, 404);
      assert.equal((await post('/orders', { sku: 'SKU-A', qty: 0 })).status, 400);
      assert.deepEqual(await (await fetch(`http://127.0.0.1:${port}/orders/1`)).json(), { id: 1, sku: 'SKU-A', qty: 5, status: 'CANCELLED', version: 3 });
      const health = await fetch(`http://127.0.0.1:${port}/healthz`);
      assert.equal(health.status, 200);
      assert.equal(((await health.json()) as { checks: { database: { storeId: string } } }).checks.database.storeId, await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'"));
    } finally {
      assert.equal((await stopApp(producer)).code, 0, producer.output());
    }
    assert.deepEqual((await db.pool(1).query('SELECT event_type, seq::int FROM outbox ORDER BY id')).rows, [
      { event_type: 'OrderPlaced', seq: 1 },
      { event_type: 'OrderQtyChanged', seq: 2 },
      { event_type: 'OrderCancelled', seq: 3 },
    ]);
    await o.relay();
    await o.consume();
    await o.verify();
  });

  it('answers 503 while PostgreSQL ends its sessions under load, and never crashes (issue 30)', async () => {
    await o.init();
    const port = await freePort();
    const producer = startApp(h.env, PRODUCER, [], { ...pgEnv(), PORT: String(port) });
    const statuses = new Map<number, number>();
    try {
      await waitFor(() => /"msg":"producer listening"/.test(producer.output()), { message: producer.output() });
      const stop = new AbortController();
      const post = async () => {
        while (!stop.signal.aborted && producer.child.exitCode === null) {
          const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sku: 'SKU-A', qty: 1 }) };
          // 0: no answer (the connection reset, the producer gone).
          const status = await fetch(`http://127.0.0.1:${port}/orders`, init).then((res) => res.status, () => 0);
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      };
      const clients = Array.from({ length: 8 }, post);
      // Ends the producer's sessions again and again, most of them checked out mid-transaction.
      const terminate = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'outbox-producer'";
      for (let i = 0; i < 20; i += 1) {
        await db.scalar(terminate);
        await waitFor(() => (statuses.get(201) ?? 0) > i * 5 || producer.child.exitCode !== null, { timeoutMs: 10_000 });
      }
      stop.abort();
      await Promise.all(clients);
      assert.equal(producer.child.exitCode, null, `the producer exited: ${producer.output().slice(-2000)}`);
      assert.deepEqual([...statuses.keys()].filter((status) => status !== 201 && status !== 503), [], JSON.stringify([...statuses]));
      assert.ok((statuses.get(503) ?? 0) > 0, `no request met an ended session: ${JSON.stringify([...statuses])}`);
      assert.doesNotMatch(producer.output(), /uncaught/i);
    } finally {
      if (producer.child.exitCode === null) assert.equal((await stopApp(producer)).code, 0, producer.output());
    }
  });

  it('is attached to the store while it runs: init --force refuses (exit 4); a session PostgreSQL ends is registered again; a killed producer leaves nothing behind', async () => {
    await o.init();
    const producer = startApp(h.env, PRODUCER, [], { ...pgEnv(), PORT: String(await freePort()) });
    const name = `outbox-producer ${hostname()} pid ${producer.child.pid}`;
    // Registered as init --force reads it: its session holds the attached lock (connected is not enough: it locks next).
    const registry = db.pool(1);
    const attached = async () => (await pgAttachedApps(registry)).filter((app) => app === name).length;
    const forced = () => runCli(['init', '--force'], { ...h.env, env: pgEnv() });
    try {
      await waitFor(() => /"msg":"producer listening"/.test(producer.output()), { message: producer.output() });
      const refused = await forced();
      assert.equal(refused.code, 4, refused.stdout + refused.stderr);
      assert.match(refused.stderr, new RegExp(`^outbox: ${name} has PostgreSQL database ${db.name} open: stop them first`));
      // PostgreSQL ends its session (a restart, an operator): it registers again.
      assert.equal(await db.scalar<boolean>('SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [name]), true);
      await waitFor(async () => (await attached()) === 1, { message: 'the producer did not register again' });
      assert.equal((await forced()).code, 4);
    } finally {
      producer.child.kill('SIGKILL');
      await producer.exited;
    }
    // Its session went with the process: no stale registration.
    await waitFor(async () => (await attached()) === 0, { message: 'the killed producer\'s session stayed' });
    const after = await forced();
    assert.equal(after.code, 0, after.stdout + after.stderr);
  });

  it('runs its built-in traffic (OUTBOX_RATE) on PostgreSQL, each operation a pg transaction, and serves /metrics with the PENDING rows read from PostgreSQL; the orders and events verify', async () => {
    await o.init();
    const port = await freePort();
    const producer = startApp(h.env, PRODUCER, [], { ...pgEnv(), PORT: String(port), OUTBOX_RATE: '200', OUTBOX_DURATION: '1s' });
    const gauge = async (name: string) => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
      return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    try {
      const stopped = await waitFor(() => producer.output().split('\n').find((line) => line.includes('"msg":"traffic stopped"')), { timeoutMs: 20_000, message: producer.output() });
      const stats = JSON.parse(stopped!) as { placed: number; changed: number; cancelled: number; failed: number };
      assert.equal(stats.failed, 0, stopped);
      // Operations of more than one kind, each to be matched with its event. The rate is not what this
      // proves: each operation is awaited, so a loaded machine runs fewer than 200 in the second.
      assert.ok(stats.placed >= 10 && stats.changed >= 1, stopped);
      const events = await db.scalar<number>('SELECT COUNT(*)::int FROM outbox');
      assert.equal(events, stats.placed + stats.changed + stats.cancelled, 'one event per operation');
      assert.equal(await db.scalar<number>('SELECT COUNT(*)::int FROM orders'), stats.placed);
      assert.equal(await gauge('outbox_pending_events'), events);
      assert.ok((await gauge('outbox_oldest_pending_age_seconds'))! > 0);
      await o.relay();
      assert.equal(await gauge('outbox_pending_events'), 0);
      assert.equal(await gauge('outbox_oldest_pending_age_seconds'), 0);
    } finally {
      assert.equal((await stopApp(producer)).code, 0, producer.output());
    }
    await o.consume();
    assert.match(await o.verify(), /^orders with missing events +0 +0 +ok$[\s\S]*^SKUs whose reserved qty != live orders +0 +0 +ok$[\s\S]*^VERIFY OK$/m);
  });
});
