import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { count, readDb, snapshotStores, tempDir } from './helpers/stores.js';

const h = useHarness({ init: false });

async function freshDir() {
  const dir = tempDir();
  const result = await runCli(['init'], { dir, redisUrl: h.redis.url });
  assert.equal(result.code, 0, result.stderr);
  return dir;
}

describe('outbox init', () => {
  it('creates app.db with the contract schema, the partial PENDING index and WAL', async () => {
    const dir = await freshDir();
    const db = readDb(dir);
    try {
      const columns = (table: string) => (db.pragma(`table_info(${table})`) as { name: string; dflt_value: string | null }[]);
      const orderColumns = columns('orders').map((c) => c.name);
      for (const name of ['id', 'sku', 'qty']) assert.ok(orderColumns.includes(name), `orders.${name}`);
      const outbox = columns('outbox');
      for (const name of ['event_id', 'aggregate_id', 'seq', 'event_type', 'payload', 'status']) {
        assert.ok(outbox.some((c) => c.name === name), `outbox.${name}`);
      }
      assert.equal(outbox.find((c) => c.name === 'status')!.dflt_value, "'PENDING'");
      const index = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'outbox_pending'").get() as { sql: string };
      assert.match(index.sql, /ON outbox\(status\) WHERE status = 'PENDING'/);
      assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
      const unique = db.prepare("SELECT sql FROM sqlite_master WHERE name = 'outbox'").get() as { sql: string };
      assert.match(unique.sql, /UNIQUE \(aggregate_id, seq\)/);
    } finally {
      db.close();
    }
  });

  it('refuses to wipe an existing database without --force and changes nothing', async () => {
    const dir = await freshDir();
    assert.equal((await runCli(['place-order'], { dir, redisUrl: h.redis.url })).code, 0);
    const before = await snapshotStores(dir, h.redis.url);
    const result = await runCli(['init'], { dir, redisUrl: h.redis.url });
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /^outbox: .*app\.db already exists: pass --force/);
    assert.equal(result.stderr.trim().split('\n').length, 1);
    assert.equal(await snapshotStores(dir, h.redis.url), before);
  });

  it('with --force recreates the database and clears only this project\'s Redis keys', async () => {
    const dir = await freshDir();
    await runCli(['place-order', '--count', '2'], { dir, redisUrl: h.redis.url });
    await h.client.set('someone-else:key', 'keep me');
    await h.client.rpush('outbox.events', 'x');
    await h.client.hset('processed', 'e', '1');
    await h.client.set('outbox:seen:e', '1');
    const result = await runCli(['init', '--force'], { dir, redisUrl: h.redis.url });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.deepEqual(await h.client.keys('*'), ['someone-else:key']);
    await h.client.del('someone-else:key');
  });

  it('with --force and Redis unreachable fails and leaves the database as it was', async () => {
    const dir = await freshDir();
    await runCli(['place-order'], { dir, redisUrl: h.redis.url });
    const result = await runCli(['init', '--force', '--redis', 'redis://127.0.0.1:1'], { dir, redisUrl: h.redis.url });
    assert.equal(result.code, 5);
    assert.match(result.stderr, /^outbox: cannot connect to Redis at redis:\/\/127\.0\.0\.1:1 \(ECONNREFUSED\)/);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 1);
  });
});

describe('outbox place-order', () => {
  it('three runs give three orders and three PENDING OrderPlaced rows', async () => {
    const dir = await freshDir();
    for (let i = 0; i < 3; i += 1) {
      const result = await runCli(['place-order', '--sku', 'SKU-A', '--qty', '2'], { dir, redisUrl: h.redis.url });
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /^placed order \d+ \(SKU-A x2\), event [0-9a-f-]{36}$/m);
    }
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 3);
    assert.equal(count(dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING' AND event_type = 'OrderPlaced' AND seq = 1"), 3);
    const db = readDb(dir);
    try {
      const row = db.prepare('SELECT aggregate_id, payload FROM outbox ORDER BY id LIMIT 1').get() as { aggregate_id: string; payload: string };
      assert.equal(row.aggregate_id, 'order:1');
      assert.deepEqual(JSON.parse(row.payload), { orderId: 1, sku: 'SKU-A', qty: 2 });
    } finally {
      db.close();
    }
  });

  it('--count K places K orders, each with its own event', async () => {
    const dir = await freshDir();
    assert.equal((await runCli(['place-order', '--count', '25'], { dir, redisUrl: h.redis.url })).code, 0);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 25);
    assert.equal(count(dir, 'SELECT COUNT(DISTINCT aggregate_id) FROM outbox'), 25);
  });

  it('a failure between the two INSERTs leaves neither row', async () => {
    const dir = await freshDir();
    // The next order will get id 1; an outbox row already holding (order:1, seq 1) makes the
    // outbox INSERT fail on UNIQUE(aggregate_id, seq), after the order INSERT succeeded.
    const db = new Database(join(dir, 'app.db'));
    db.prepare("INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at) VALUES ('blocker', 'order:1', 1, 'OrderPlaced', '{}', 0)").run();
    db.close();
    const result = await runCli(['place-order'], { dir, redisUrl: h.redis.url });
    assert.notEqual(result.code, 0);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.equal(count(dir, "SELECT COUNT(*) FROM outbox WHERE event_id <> 'blocker'"), 0);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM outbox_aggregates'), 0, 'the seq taken is rolled back too');
  });

  it('a process killed between the two INSERTs leaves neither row', async () => {
    const dir = await freshDir();
    const result = await runCli(['place-order'], { dir, redisUrl: h.redis.url, env: { OUTBOX_CRASH_POINTS: 'producer.mid-transaction' } });
    assert.equal(result.signal, 'SIGKILL');
    assert.match(result.stderr, /crash point producer\.mid-transaction/);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM outbox'), 0);
    assert.equal((await runCli(['place-order'], { dir, redisUrl: h.redis.url })).code, 0);
    assert.equal(count(dir, 'SELECT COUNT(*) FROM outbox'), 1);
  });
});

describe('order lifecycle', () => {
  it('change-qty and cancel-order append the next seq for the aggregate in the same transaction', async () => {
    const dir = await freshDir();
    const env = { dir, redisUrl: h.redis.url };
    await runCli(['place-order', '--sku', 'SKU-B', '--qty', '2'], env);
    const change = await runCli(['change-qty', '--id', '1', '--qty', '7'], env);
    assert.equal(change.code, 0, change.stderr);
    assert.match(change.stdout, /order 1 now SKU-B x7, event .* \(seq 2\)/);
    const cancel = await runCli(['cancel-order', '--id', '1'], env);
    assert.equal(cancel.code, 0, cancel.stderr);
    const db = readDb(dir);
    try {
      const events = db.prepare('SELECT seq, event_type, payload FROM outbox WHERE aggregate_id = \'order:1\' ORDER BY id').all() as {
        seq: number;
        event_type: string;
        payload: string;
      }[];
      assert.deepEqual(
        events.map((e) => [e.seq, e.event_type, JSON.parse(e.payload)]),
        [
          [1, 'OrderPlaced', { orderId: 1, sku: 'SKU-B', qty: 2 }],
          [2, 'OrderQtyChanged', { orderId: 1, sku: 'SKU-B', qty: 7, previousQty: 2 }],
          [3, 'OrderCancelled', { orderId: 1, sku: 'SKU-B', qty: 7 }],
        ],
      );
      assert.deepEqual(db.prepare('SELECT qty, status FROM orders WHERE id = 1').get(), { qty: 7, status: 'CANCELLED' });
      assert.equal(db.prepare("SELECT last_seq FROM outbox_aggregates WHERE aggregate_id = 'order:1'").pluck().get(), 3);
    } finally {
      db.close();
    }
  });
});

describe('bad input: one line, non-zero exit, both stores unchanged', () => {
  const cases: [string, string[], RegExp][] = [
    ['qty 0', ['place-order', '--qty', '0'], /--qty must be a whole number from 1 to 1000000, got "0"/],
    ['negative qty', ['place-order', '--qty', '-2'], /--qty must be a whole number/],
    ['fractional qty', ['place-order', '--qty', '1.5'], /--qty must be a whole number/],
    ['qty not a number', ['place-order', '--qty', 'abc'], /--qty must be a whole number/],
    ['empty sku', ['place-order', '--sku', ''], /--sku must be 1-64 characters/],
    ['count 0', ['place-order', '--count', '0'], /--count must be a whole number/],
    ['unknown order id (change)', ['change-qty', '--id', '999', '--qty', '2'], /no order 999/],
    ['unknown order id (cancel)', ['cancel-order', '--id', '999'], /no order 999/],
    ['order id not a number', ['cancel-order', '--id', 'one'], /--id must be a positive whole number/],
    ['cancelling twice', ['cancel-order', '--id', '2'], /order 2 is already cancelled/],
    ['changing a cancelled order', ['change-qty', '--id', '2', '--qty', '4'], /order 2 is already cancelled/],
    ['same qty', ['change-qty', '--id', '1', '--qty', '3'], /order 1 already has qty 3/],
    ['unknown option', ['place-order', '--qyt', '3'], /Unknown argument/],
    ['unknown command', ['place'], /Unknown argument: place/],
    ['Redis unreachable', ['relay', '--redis', 'redis://:s3cret@127.0.0.1:1'], /cannot connect to Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:1 \(ECONNREFUSED\)/],
    ['Redis URL not a redis URL', ['relay', '--redis', 'http://localhost'], /--redis must start with redis:\/\/ or rediss:\/\//],
  ];
  let dir: string;

  before(async () => {
    dir = await freshDir();
    const env = { dir, redisUrl: h.redis.url };
    await runCli(['place-order', '--qty', '3'], env);
    await runCli(['place-order'], env);
    await runCli(['cancel-order', '--id', '2'], env);
  });

  for (const [name, args, message] of cases) {
    it(name, async () => {
      const before = await snapshotStores(dir, h.redis.url);
      const result = await runCli(args, { dir, redisUrl: h.redis.url });
      assert.notEqual(result.code, 0);
      assert.match(result.stderr, message);
      assert.equal(result.stderr.trim().split('\n').length, 1, `one line, got: ${result.stderr}`);
      assert.doesNotMatch(result.stderr, /\n\s+at /);
      assert.doesNotMatch(result.stderr, /s3cret/);
      assert.equal(result.stdout, '');
      assert.equal(await snapshotStores(dir, h.redis.url), before);
    });
  }

  it('a missing app.db is reported with the fix, and no file is created', async () => {
    const empty = tempDir();
    for (const args of [['place-order'], ['relay'], ['report'], ['verify']]) {
      const result = await runCli(args, { dir: empty, redisUrl: h.redis.url });
      assert.equal(result.code, 5);
      assert.match(result.stderr, /^outbox: no database at .*app\.db: run "outbox init" first/);
    }
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 2);
  });

  it('a corrupt app.db is reported and left as it was', async () => {
    const corrupt = tempDir();
    writeFileSync(join(corrupt, 'app.db'), 'this is not a database, just some text that is long enough'.repeat(20));
    const before = await snapshotStores(corrupt, h.redis.url);
    for (const args of [['place-order'], ['relay'], ['cancel-order', '--id', '1']]) {
      const result = await runCli(args, { dir: corrupt, redisUrl: h.redis.url });
      assert.equal(result.code, 5);
      assert.match(result.stderr, /^outbox: cannot open .*app\.db \(file is not a database\)/);
      assert.equal(result.stderr.trim().split('\n').length, 1);
    }
    assert.equal(await snapshotStores(corrupt, h.redis.url), before);
  });
});
