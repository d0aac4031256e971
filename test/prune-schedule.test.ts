import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startApp, stopApps } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { count } from './helpers/stores.js';
import { runCli } from './helpers/cli.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { connectRedis, createConsumer } from '../shared/outbox/index.js';
import { connectTarget, connectTargetPartitions, closePartitions } from '../shared/outbox/redis/connect-partitions.js';
import type { Partitions } from '../shared/outbox/redis/partitions.js';
import { openDatabase, WAL_SIZE_LIMIT } from '../shared/outbox/store/open-database.js';
import { relayConfig } from '../shared/runtime/config/relay-config.js';
import { guardCount } from './helpers/guards.js';

// The relay app prunes by default, also across partitions, and prune counts an event whose records
// the dedupe window swept as applied (its seq guard is the evidence): the store stays bounded.
const h = useHarness();
const o = orders(() => h.env);
const RELAY = 'dist/apps/relay/main.js';
/** The orders the traffic changes, 3 writes every 10 ms, and the samples taken, one a second. */
const ORDERS = 100;
const PER_TICK = 3;
const SAMPLES = 30;
const CONSUMER = 'dist/apps/consumer/main.js';
const kept = (stdout: string) => Number(/^kept \(not applied yet\): (\d+)$/m.exec(stdout)?.[1]);

/** The harness's Redis as `count` partitions, for `fn`; closed after it. */
async function withPartitions<T>(count: number, fn: (partitions: Partitions) => Promise<T>): Promise<T> {
  const target = { redisUrl: h.env.redisUrl, partitions: count };
  const partitions = await connectTargetPartitions(target, (options) => connectTarget(target, options));
  try {
    return await fn(partitions);
  } finally {
    await closePartitions(partitions);
  }
}

describe('prune with the dedupe window and partitions', () => {
  it('prunes rows whose processed entry and apply count the window swept: their seq guard says applied', async () => {
    o.place(6);
    o.changeQty(1, 3);
    await o.relay();
    const redis = await connectRedis(h.env.redisUrl);
    const consumer = await createConsumer({ redis, handlers, consumerId: 'window', dedupeWindowMs: 1000 });
    after(async () => (await consumer.close(), redis.disconnect()));
    await consumer.drain();
    assert.equal(await h.client.hlen('processed'), 7);
    // Each drain ends with a sweep: once the window has passed, one finds the records due.
    const swept = async () => (await consumer.drain(), (await h.client.hlen('processed')) === 0);
    await waitFor(swept, { timeoutMs: 10_000 });
    assert.equal(await h.client.hlen('outbox:apply-count'), 0);
    assert.ok(Number(await h.client.hget('outbox:window', 'sweptThrough')) > 0);
    // Then two events applied inside the window (their records kept) and one not applied at all.
    o.place(2);
    await o.relay();
    await consumer.drain();
    o.changeQty(2, 4);
    await o.relay();

    const result = await h.cli('prune', '--older-than', '0s');
    assert.match(result.stdout, /^pruned 9 PUBLISHED row\(s\)/m);
    assert.equal(kept(result.stdout), 1);
    assert.deepEqual(ids(), [10]);
    assert.equal(count(h.env.dir, "SELECT through_seq FROM outbox_pruned WHERE aggregate_id = 'order:1'"), 2);

    // The window is no blanket excuse: an event committed after the last sweep, passed by its seq
    // guard with no records, is one another event took (here: its records deleted by hand).
    await consumer.drain();
    const event = db((d) => d.prepare('SELECT event_id FROM outbox WHERE id = 10').pluck().get() as string);
    assert.equal(await h.client.hdel('processed', event), 1);
    await h.client.hdel('outbox:apply-count', event);
    const refused = await runCli(['prune', '--older-than', '0s'], h.env);
    assert.equal(refused.code, 5, refused.stdout + refused.stderr);
    assert.match(refused.stderr, /^outbox: .*Redis applied another event at order:2 seq 2, and /);
    assert.equal(refused.stderr.trim().split('\n').length, 1);
    assert.deepEqual(ids(), [10]);
  });

  it('prunes rows whose guard the horizon dropped, and keeps a new aggregate\'s unapplied row', async () => {
    o.place(3);
    o.changeQty(1, 2);
    await o.relay();
    const redis = await connectRedis(h.env.redisUrl);
    const options = { redis, handlers, consumerId: 'horizon', dedupeWindowMs: 1000, aggregateHorizonMs: 2000 };
    const consumer = await createConsumer(options);
    after(async () => (await consumer.close(), redis.disconnect()));
    await consumer.drain();
    // The horizon is time: drains (each ends with a sweep) until it has dropped every guard.
    const dropped = async () => (await consumer.drain(), (await guardCount(h.client)) === 0);
    await waitFor(dropped, { timeoutMs: 10_000, intervalMs: 200 });
    // A new order, relayed and not applied: no guard either, but committed after the drops.
    o.place(1);
    await o.relay();

    const result = await h.cli('prune', '--older-than', '0s');
    assert.match(result.stdout, /^pruned 4 PUBLISHED row\(s\)/m);
    assert.equal(kept(result.stdout), 1);
    assert.deepEqual(ids(), [5]);
  });

  it('outbox prune across partitions: applied rows go (each looked up in its partition), the others stay', async () => {
    const env = { ...h.env, env: { OUTBOX_PARTITIONS: '3' } };
    const p = orders(() => env);
    await h.client.flushall();
    p.place(12);
    await p.relay();
    await p.consume();
    // Not applied: order:13 placed, order:1's next event.
    p.place(1);
    p.changeQty(1, 5);
    await p.relay();
    const spread = await withPartitions(3, async (partitions) =>
      Promise.all(partitions.clients.map(async (client) => guardCount(client))),
    );
    assert.ok(spread.filter((n) => n > 0).length >= 2, `the aggregates are in several partitions: ${spread.join(',')}`);

    // Another number of partitions than Redis holds: refused with one line, nothing deleted.
    const wrong = await runCli(['prune', '--older-than', '0s'], { ...h.env, env: { OUTBOX_PARTITIONS: '2' } });
    assert.notEqual(wrong.code, 0, wrong.stdout);
    assert.equal(wrong.stderr.trim().split('\n').length, 1, wrong.stderr);
    assert.equal(ids().length, 14);

    const result = await runCli(['prune', '--older-than', '0s', '--batch-size', '5'], env);
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /^pruned 12 PUBLISHED row\(s\) in 3 batch\(es\)/m);
    assert.equal(kept(result.stdout), 2);
    assert.deepEqual(ids(), [13, 14]);
    assert.equal(count(h.env.dir, 'SELECT SUM(events) FROM outbox_pruned'), 12);

    await p.consume();
    const rest = await runCli(['prune', '--older-than', '0s'], env);
    assert.match(rest.stdout, /^pruned 2 PUBLISHED row\(s\)/m);
    assert.deepEqual(ids(), []);
  });
});

describe('the relay app keeps the store bounded', () => {
  it('prunes by default: rows applied and 7 days old, every 5 minutes; off turns it off', () => {
    const defaults = relayConfig({}, {});
    assert.deepEqual([defaults.pruneOlderThanMs, defaults.pruneEveryMs], [7 * 86_400_000, 300_000]);
    assert.equal(relayConfig({}, { OUTBOX_PRUNE_OLDER_THAN: 'off' }).pruneOlderThanMs, undefined);
  });

  it('under constant writes across partitions, app.db, its WAL and the outbox rows stop growing', async (t) => {
    await h.client.flushall();
    const prunes = { OUTBOX_PRUNE_OLDER_THAN: '2s', OUTBOX_PRUNE_EVERY: '1s' };
    const settings = { OUTBOX_PARTITIONS: '2', OUTBOX_RELAY_EVERY: '200ms', ...prunes };
    const relay = startApp(h.env, RELAY, [], settings);
    const consumer = startApp(h.env, CONSUMER, [], { OUTBOX_PARTITIONS: '2', OUTBOX_HANDLER_THREADS: '1' });
    const writer = openDatabase(h.env.dir);
    const service = createOrderService(writer);
    // Constant traffic on a fixed set of orders, each write its own transaction, a few hundred a
    // second: what could grow then is the outbox (new orders would grow their own rows).
    for (let i = 0; i < ORDERS; i += 1) service.placeOrder({ sku: 'SKU-1', qty: 1 });
    let written = 0;
    const writes = setInterval(() => {
      for (let i = 0; i < PER_TICK; i += 1, written += 1) service.changeQty((written % ORDERS) + 1, written + 2);
    }, 10);
    const samples: { bytes: number; wal: number; rows: number }[] = [];
    try {
      const pruned = () => /"msg":"outbox pruned","deleted":[1-9]/.test(relay.output());
      await waitFor(pruned, { timeoutMs: 20_000, message: `no prune deleted a row: ${relay.output()}` });
      for (let i = 0; i < SAMPLES; i += 1) {
        // A sample a second: a sampling interval, not a wait for a condition.
        await new Promise((resolve) => setTimeout(resolve, 1000));
        const rows = writer.prepare('SELECT COUNT(*) FROM outbox').pluck().get() as number;
        const wal = sizeOf('app.db-wal');
        samples.push({ bytes: sizeOf('app.db') + wal, wal, rows });
      }
    } finally {
      clearInterval(writes);
      await stopApps([relay, consumer]);
      writer.close();
    }
    const mb = (bytes: number) => `${(bytes / 1e6).toFixed(2)}MB`;
    const shown = samples.map((s) => `${mb(s.bytes)}/${mb(s.wal)}/${s.rows}`).join(' ');
    t.diagnostic(`app.db + WAL / WAL / outbox rows, a sample a second: ${shown}`);
    type Field = 'bytes' | 'wal' | 'rows';
    const third = (k: number) => samples.slice((k * SAMPLES) / 3, ((k + 1) * SAMPLES) / 3);
    const max = (k: number, field: Field) => Math.max(...third(k).map((s) => s[field]));
    const median = (k: number, field: Field) => third(k).map((s) => s[field]).sort((a, b) => a - b)[SAMPLES / 6];
    // Their footprint, app.db and its WAL: its usual size (the median: the WAL goes back to its limit
    // after an excursion, when a reader held a snapshot as a checkpoint ran) holds, and no excursion
    // outgrows the WAL's limit twice over.
    assert.ok(median(2, 'bytes') <= median(1, 'bytes') * 1.05, `app.db and its WAL still grow: ${shown}`);
    assert.ok(Math.max(max(1, 'wal'), max(2, 'wal')) <= 2 * WAL_SIZE_LIMIT, `the WAL: ${shown}`);
    // Rows stay within a few seconds of traffic (2 s old, pruned every 1 s), however many were written.
    const rowsBounded = max(2, 'rows') <= max(1, 'rows') * 2 && max(2, 'rows') < written / 4;
    assert.ok(rowsBounded, `rows: ${shown}; written ${written}`);
  });
});

describe('the WAL', () => {
  it('gives back the size it reached while a reader held an old snapshot, at its next restart', () => {
    const writer = openDatabase(h.env.dir);
    const reader = openDatabase(h.env.dir);
    try {
      const service = createOrderService(writer);
      // A read transaction held open: no checkpoint can restart the WAL, so it grows past its usual 4 MB.
      reader.exec('BEGIN');
      reader.prepare('SELECT COUNT(*) FROM outbox').get();
      for (let i = 0; i < 5000 && sizeOf('app.db-wal') <= 3 * WAL_SIZE_LIMIT; i += 1) {
        service.placeOrder({ sku: 'SKU-1', qty: 1 });
      }
      assert.ok(sizeOf('app.db-wal') > 3 * WAL_SIZE_LIMIT, `the WAL grew to ${sizeOf('app.db-wal')} bytes`);
      reader.exec('COMMIT');
      // The next commit's checkpoint copies it all; the one after starts the WAL over, cut back to the limit.
      for (let i = 0; i < 3; i += 1) service.placeOrder({ sku: 'SKU-1', qty: 1 });
      assert.ok(sizeOf('app.db-wal') <= WAL_SIZE_LIMIT, `the WAL kept ${sizeOf('app.db-wal')} bytes`);
    } finally {
      reader.close();
      writer.close();
    }
  });
});

function sizeOf(file: string): number {
  return statSync(join(h.env.dir, file), { throwIfNoEntry: false })?.size ?? 0;
}

function db<T>(fn: (d: ReturnType<typeof openDatabase>) => T): T {
  const d = openDatabase(h.env.dir);
  try {
    return fn(d);
  } finally {
    d.close();
  }
}

function ids(): number[] {
  return db((d) => d.prepare('SELECT id FROM outbox ORDER BY id').pluck().all() as number[]);
}
