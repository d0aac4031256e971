import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { count } from './helpers/stores.js';

const h = useHarness();
const o = orders(() => h.env);

function message(aggregateId: number, seq: number, type = 'OrderPlaced') {
  return JSON.stringify({ event_id: `evt-${aggregateId}-${seq}`, aggregate_id: `order:${aggregateId}`, seq, event_type: type, payload: { orderId: aggregateId, sku: 'SKU-X', qty: 1 }, store_id: h.storeId });
}

async function placeLifecycle(orderCount: number) {
  o.place(orderCount, { sku: 'SKU-A', qty: 2 });
  o.changeQty(1, 5);
  o.cancel(2);
}

describe('verify --repair', () => {
  it('after Redis restarted without persistence: verify reports the loss, --repair rebuilds it from SQLite, the consumer restores every invariant', async () => {
    await placeLifecycle(20);
    await o.relay();
    await o.consume();
    o.place(10, { sku: 'SKU-B' });
    await o.relay();
    assert.equal(await h.client.llen('outbox.events'), 10);

    await h.redis.stop();
    await h.redis.resume();
    assert.equal(await h.client.dbsize(), 0, 'the restarted Redis kept nothing');

    const broken = await runCli(['verify'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /Redis serves this store +yes +no: Redis lost its state +FAIL/);
    assert.match(broken.stdout, /events lost \(never applied, not in Redis\) +0 +32 +FAIL/);

    const repair = await runCli(['verify', '--repair'], h.env);
    assert.match(repair.stdout, /repair: Redis lost its state: rebuilding it from SQLite, 32 published event\(s\) set back to PENDING/);
    assert.match(repair.stdout, /repair: relayed 32 event\(s\)/);
    assert.equal(await h.client.llen('outbox.events'), 32);
    await o.consume();
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '41', 'SKU-B': '10' });
  });

  it('republishes only what is lost, not what is still queued or already applied', async () => {
    o.place(6);
    await o.relay();
    await o.consume();
    o.place(4);
    await o.relay();
    const [lostMessage] = await h.client.lrange('outbox.events', 0, 0);
    await h.client.lpop('outbox.events');

    const repair = await runCli(['verify', '--repair'], h.env);
    assert.match(repair.stdout, /events lost \(never applied, not in Redis\) +0 +1 +FAIL/);
    assert.match(repair.stdout, /repair: republished 1 lost event\(s\)/);
    const queued = await h.client.lrange('outbox.events', 0, -1);
    assert.equal(queued.length, 4);
    assert.ok(queued.includes(lostMessage));
    await o.consume();
    await o.verify();
    assert.match((await h.cli('verify', '--repair')).stdout, /repair: no event is lost, nothing to republish/);
  });

  it('reports aggregates whose recorded application order contradicts their seq', async () => {
    o.place(1);
    o.changeQty(1, 3);
    await o.relay();
    await o.consume();
    const processed = await h.client.hgetall('processed');
    for (const [id, value] of Object.entries(processed)) {
      const entry = JSON.parse(value);
      entry.applyOrder = 10 - entry.seq;
      await h.client.hset('processed', id, JSON.stringify(entry));
    }
    const result = await runCli(['verify'], h.env);
    assert.equal(result.code, 1);
    assert.match(result.stdout, /aggregates applied out of seq order +0 +1 +FAIL\n +e\.g\. order:1/);
  });
});

describe('outbox replay', () => {
  it('sets a range of rows back to PENDING; the consumer absorbs the republished events', async () => {
    o.place(12);
    await o.relay();
    await o.consume();
    const result = await h.cli('replay', '--from', '5', '--to', '10');
    assert.match(result.stdout, /^6 row\(s\) set back to PENDING/);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING' AND id BETWEEN 5 AND 10"), 6);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 6/);
    await o.verify();
  });

  it('takes a time range', async () => {
    o.place(3);
    await o.relay();
    const result = await h.cli('replay', '--from', new Date(Date.now() - 60_000).toISOString());
    assert.match(result.stdout, /^3 row\(s\) set back to PENDING/);
  });

  for (const [args, message] of [
    [['--from', 'yesterday'], /--from must be an outbox row id or a time/],
    [['--from', '9', '--to', '3'], /--to \(3\) is before --from \(9\)/],
    [['--from', '3', '--to', '2026-01-01T00:00:00Z'], /--from and --to must both be row ids or both be times/],
  ] as const) {
    it(`rejects ${args.join(' ')} with one line and changes nothing`, async () => {
      o.place(1);
      await o.relay();
      const result = await runCli(['replay', ...args], h.env);
      assert.equal(result.code, 2);
      assert.match(result.stderr, message);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
    });
  }
});

describe('dead-letter and parked tools', () => {
  it('lists, drops and retries dead letters', async () => {
    await h.client.rpush('outbox.events', 'garbage one', 'garbage two', 'garbage three');
    await o.consume();
    const list = await h.cli('dead-letter', 'list');
    assert.match(list.stdout, /^0  \S+  not JSON  garbage one$/m);
    const listed = JSON.parse((await h.cli('dead-letter', 'list', '--json')).stdout);
    assert.deepEqual(listed.map((d: { message: string }) => d.message), ['garbage one', 'garbage two', 'garbage three']);

    assert.match((await h.cli('dead-letter', 'drop', '--id', '1')).stdout, /^1 dead-letter entr\(ies\) dropped/);
    assert.deepEqual((await h.client.lrange('outbox.events:dead', 0, -1)).map((e) => JSON.parse(e).message), ['garbage one', 'garbage three']);

    assert.match((await h.cli('dead-letter', 'retry', '--all')).stdout, /^2 dead-letter entr\(ies\) put back on outbox\.events/);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), ['garbage one', 'garbage three']);
    assert.equal(await h.client.llen('outbox.events:dead'), 0);

    const unknown = await runCli(['dead-letter', 'drop', '--id', '7'], h.env);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /no dead-letter entry 7/);
    const nothing = await runCli(['dead-letter', 'retry'], h.env);
    assert.equal(nothing.code, 2);
    assert.match(nothing.stderr, /name the dead-letter entries with --id .* or pass --all/);
  });

  it('lists, retries and drops parked events', async () => {
    await h.client.rpush('outbox.events', message(7, 2, 'OrderCancelled'));
    await o.consume();
    assert.match((await h.cli('parked', 'list')).stdout, /^order:7:2  \S+  gap: expected seq 1, got 2  /m);

    await h.cli('parked', 'retry', '--id', 'order:7:2');
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), [message(7, 2, 'OrderCancelled')]);
    await o.consume();
    assert.equal(await h.client.hlen('outbox.events:parked'), 1);

    assert.match((await h.cli('parked', 'drop', '--all')).stdout, /^1 parked entr\(ies\) dropped/);
    assert.match((await h.cli('parked', 'list')).stdout, /^no events waiting/);
  });
});
