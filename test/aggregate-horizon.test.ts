import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { createDatabase } from '../shared/lab/init-stores.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { toMessage } from '../shared/outbox/store/events.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { SCHEMA_VERSION } from '../shared/outbox/store/schema.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { configOfEnv, orders } from './helpers/orders.js';
import { withPartitions } from '../apps/cli/stores.js';
import { tempDir, outboxRowOf } from './helpers/stores.js';
import { guardCount, guardOf } from './helpers/guards.js';

// The aggregate horizon (issue 29): the seq guard of an aggregate idle past it is dropped, and the
// aggregate's next event is still applied once and in order, by its predecessor's commit time.
// A private redis-server, app.db, and the consumer through the library (the process is not the subject).
const h = useHarness();
const o = orders(() => h.env);

const WINDOW_MS = 1000;
const HORIZON_MS = 2000;

/** A drain with a 1 s window and a 2 s horizon: applies what is queued, then sweeps what is due. */
async function consume(): Promise<void> {
  await withPartitions(configOfEnv(h.env), async (partitions) => {
    const options = { redis: partitions, handlers, consumerId: 'cli', dedupeWindowMs: WINDOW_MS, aggregateHorizonMs: HORIZON_MS };
    await (await createConsumer(options)).drain();
  });
}

/** Drains (and so sweeps) until the horizon has dropped every guard: the horizon is time, so this waits for it. */
async function untilGuardsDropped(): Promise<void> {
  await waitFor(async () => (await consume(), (await guardCount(h.client)) === 0), { timeoutMs: 10_000, intervalMs: 200, message: 'the horizon dropped no guard' });
}

const rowOf = (aggregate: string, seq: number) => outboxRowOf(h.env.dir, aggregate, seq);

const reserved = async () => Number(await h.client.hget('inventory:reserved', 'SKU-1'));

describe('the aggregate horizon', () => {
  it('drops idle guards; the next event is applied once, in order; an old duplicate is skipped', async () => {
    o.place(3);
    await o.relay();
    await consume();
    assert.equal(await reserved(), 3);
    await untilGuardsDropped();
    const window = await h.client.hgetall('outbox:window');
    assert.equal(window.droppedGuards, '3');
    assert.equal(await h.client.hlen('processed'), 0, 'the window swept the records too');

    o.changeQty(1, 5);
    await o.relay();
    await consume();
    assert.equal(await reserved(), 7, 'order 1 went from 1 to 5: applied once');
    assert.equal(await guardOf(h.client, 'order:1'), '2');

    // order:2's first event again, its record and guard both gone: committed before the drops reached.
    await h.client.rpush('outbox.events', toMessage(rowOf('order:2', 1), h.storeId));
    await consume();
    assert.equal(await reserved(), 7, 'the old event was not applied again');
    assert.equal(await guardOf(h.client, 'order:2'), null);
    assert.equal(await h.client.hget('outbox:meta', 'takenEvent'), null, 'no taken seq alarm');
    await o.verify('0s');
  });

  it('parks an event whose predecessor came after the drop, until the predecessor is applied', async () => {
    o.place(1);
    await o.relay();
    await consume();
    await untilGuardsDropped();
    o.changeQty(1, 4);
    o.changeQty(1, 6);
    await o.relay();
    // seq 3 first: its predecessor (seq 2) was committed after the drops, so it is a gap.
    const second = toMessage(rowOf('order:1', 2), h.storeId);
    assert.equal(await h.client.lrem('outbox.events', 1, second), 1);
    await consume();
    assert.equal(await h.client.hlen('outbox.events:parked'), 1, 'seq 3 parked');
    assert.equal(await reserved(), 1);
    await h.client.rpush('outbox.events', second);
    await consume();
    assert.equal(await reserved(), 6, 'seq 2 then seq 3, each once');
    assert.equal(await guardOf(h.client, 'order:1'), '3');
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
  });

  it('refuses a horizon shorter than the window, in one line', async () => {
    const result = await runCli(['consume', '--dedupe-window', '5s', '--aggregate-horizon', '2s'], h.env);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /aggregateHorizonMs \(2000\) must be at least the dedupe window \(5000 ms\)/);
    assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
  });
});

describe('outbox tables of version 4', () => {
  it('are upgraded in place: old rows keep 0, the next event carries its predecessor commit time', () => {
    const dir = tempDir();
    createDatabase(dir);
    const db = openDatabase(dir);
    createOrderService(db).placeOrder({ sku: 'SKU-1', qty: 1 });
    db.exec(`ALTER TABLE outbox DROP COLUMN prev_created_at;
      ALTER TABLE outbox_aggregates DROP COLUMN last_at;
      ALTER TABLE outbox_aggregates DROP COLUMN prev_at;
      UPDATE outbox_meta SET value = '4' WHERE key = 'schema_version'`);
    db.close();

    const upgraded = openDatabase(dir);
    try {
      assert.equal(upgraded.prepare("SELECT value FROM outbox_meta WHERE key = 'schema_version'").pluck().get(), String(SCHEMA_VERSION));
      const first = upgraded.prepare("SELECT created_at, prev_created_at FROM outbox WHERE aggregate_id = 'order:1'").get() as { created_at: number; prev_created_at: number };
      assert.equal(first.prev_created_at, 0);
      assert.equal(upgraded.prepare("SELECT last_at FROM outbox_aggregates WHERE aggregate_id = 'order:1'").pluck().get(), first.created_at);
      createOrderService(upgraded).changeQty(1, 3);
      const next = upgraded.prepare("SELECT prev_created_at FROM outbox WHERE aggregate_id = 'order:1' AND seq = 2").pluck().get();
      assert.equal(next, first.created_at);
    } finally {
      upgraded.close();
    }
  });
});
