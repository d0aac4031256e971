import assert from 'node:assert/strict';
import { setPriority } from 'node:os';
import { describe, it } from 'node:test';
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import { orderDatabaseHandlers } from '../shared/lab/orders/order-database-handlers.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { createConsumerDatabase } from '../shared/outbox/consumer/inbox/consumer-database.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { sweepWindow } from '../shared/outbox/redis/dedupe-window.js';
import { toMessage } from '../shared/outbox/store/events.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { runCli, type CliResult } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { outboxRowOf } from './helpers/stores.js';

// verify and --repair with the dedupe window (issue 29): beyond it an applied event keeps no
// processed entry nor apply count, and its aggregate's seq guard is the evidence it was applied.
// Real processes and a private redis-server; the window is 1 s, and the waits for it are real.
const h = useHarness();
const o = orders(() => h.env);

const WINDOW = '1s';

/** verify's line for the four events of a test swept by the 1 s window. */
const SWEPT_4 = /^records swept by the dedupe window \(1s\) +- +4 events, applied per their seq guard +info$/m;

/** `outbox consume --dedupe-window 1s`: drains, then sweeps what was applied a window ago. */
const consume = () => h.cli('consume', '--dedupe-window', WINDOW);

const rowOf = (aggregate: string, seq: number) => outboxRowOf(h.env.dir, aggregate, seq);

/** Waits until the window has passed since the last apply, then sweeps with a drain (nothing queued). */
async function sweepAfterWindow(): Promise<void> {
  // A real wait: the sweep drops only what was applied a whole window ago (Redis's clock).
  await new Promise((resolve) => setTimeout(resolve, 1200));
  await consume();
}

async function windowHash(): Promise<Record<string, string>> {
  return h.client.hgetall('outbox:window');
}

/** What one `outbox verify --settle 0s` sent to Redis, and what held it over 10 ms. */
interface Watched {
  result: CliResult;
  /** Calls over 10 ms (SLOWLOG), and stalls over 10 ms (LATENCY: a MULTI's whole EXEC counts). */
  slow: string[];
  /** HGETALLs of a hash that grows with history. */
  whole: string[];
  calls: number;
}

/**
 * Runs verify with every command it sends logged (SLOWLOG, threshold 0) and Redis's latency
 * monitor at 10 ms (which times a MULTI's EXEC whole). Both are wall-clock: on a loaded 2-core
 * machine the scheduler can pause redis-server mid-call for 10 ms or more, whatever the call, so
 * Redis gets a higher priority where allowed (as a production Redis owns its core) and the best
 * of three runs is judged.
 */
async function verifyWatched(): Promise<Watched> {
  try {
    setPriority(Number(/process_id:(\d+)/.exec(await h.client.info('server'))![1]), -15);
  } catch {
    // Not allowed here: the three runs remain.
  }
  await h.client.config('SET', 'slowlog-max-len', '1000000');
  const growing = new Set(['processed', 'outbox:apply-count', 'outbox:applied-seq', 'outbox.events:parked']);
  let best: Watched | undefined;
  for (let run = 0; run < 3 && (best === undefined || best.slow.length > 0); run += 1) {
    await h.client.config('SET', 'slowlog-log-slower-than', '0');
    await h.client.config('SET', 'latency-monitor-threshold', '10');
    await h.client.slowlog('RESET');
    await h.client.call('LATENCY', 'RESET');
    const result = await runCli(['verify', '--settle', '0s'], h.env);
    await h.client.config('SET', 'slowlog-log-slower-than', '10000');
    await h.client.config('SET', 'latency-monitor-threshold', '0');
    const log = (await h.client.slowlog('GET', -1)) as [number, number, number, string[]][];
    const calls = log.filter(([, , , args]) => !/^(slowlog|config|latency)$/i.test(args[0]));
    const latest = (await h.client.call('LATENCY', 'LATEST')) as [string, number, number, number][];
    const slow = [
      ...calls
        .filter(([, , micros]) => micros > 10_000)
        .map(([, , micros, [name, key]]) => `${name} ${key}: ${micros} µs`),
      ...latest.filter(([event]) => /command/.test(event)).map(([event, , , max]) => `${event} stall: ${max} ms`),
    ];
    const whole = calls
      .filter(([, , , [name, key]]) => /^hgetall$/i.test(name) && growing.has(key))
      .map(([, , , [, key]]) => key);
    if (best === undefined || slow.length < best.slow.length) best = { result, slow, whole, calls: calls.length };
  }
  return best!;
}

describe('verify with the dedupe window', () => {
  it('counts swept events applied by their seq guard; a real loss fails, --repair republishes only it', async () => {
    // order:1 seq 1-2, order:2-4 seq 1; order:4's message is taken off the queue before any apply:
    // committed before the sweep, but above its guard (0), so lost, not swept.
    o.place(4);
    o.changeQty(1, 5);
    await o.relay();
    const early = toMessage(rowOf('order:4', 1), h.storeId);
    assert.equal(await h.client.lrem('outbox.events', 1, early), 1);
    await consume();
    assert.equal(await h.client.hlen('processed'), 4);
    await sweepAfterWindow();
    assert.equal(await h.client.hlen('processed'), 0, 'the sweep dropped every processed entry');
    assert.equal(await h.client.hlen('outbox:apply-count'), 0);
    assert.equal((await windowHash()).sweptEvents, '4');

    // Committed after the sweep and relayed, then the queue is lost: order:5 seq 1 and order:2 seq 2.
    o.place(1);
    o.changeQty(2, 7);
    await o.relay();
    assert.equal(await h.client.del('outbox.events'), 1);

    const failed = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(failed.code, 1, failed.stdout + failed.stderr);
    assert.match(failed.stdout, /^events lost \(never applied, not in Redis\) +0 +3 +FAIL$/m);
    const lost = [rowOf('order:4', 1), rowOf('order:5', 1), rowOf('order:2', 2)].map((r) => r.event_id);
    for (const id of lost) assert.match(failed.stdout, new RegExp(id));
    for (const row of [rowOf('order:1', 1), rowOf('order:1', 2), rowOf('order:2', 1), rowOf('order:3', 1)]) {
      assert.doesNotMatch(failed.stdout, new RegExp(row.event_id), 'a swept event is neither lost nor taken');
    }
    assert.match(failed.stdout, /^the store is not behind Redis +yes +yes +ok$/m);
    assert.match(failed.stdout, /^processed_unique \+ swept = outbox rows +7 +4 +FAIL$/m);
    assert.match(failed.stdout, SWEPT_4);

    const repaired = await h.cli('verify', '--repair', '--yes', '--settle', '0s');
    assert.match(repaired.stdout, /^repair: republished 3 lost event\(s\) to outbox\.events/m);
    // Only the lost ones: a swept event republished would be skipped, but counted as work.
    const idOf = (message: string) => (JSON.parse(message) as { event_id: string }).event_id;
    const queued = (await h.client.lrange('outbox.events', 0, -1)).map(idOf);
    assert.deepEqual(queued.sort(), lost.sort());
    assert.match((await consume()).stdout, /applied 3, duplicates skipped 0, parked 0,/);
    const ok = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(ok.stdout, /^processed_unique \+ swept = outbox rows +7 +7 +ok$/m);
    assert.match(ok.stdout, /^aggregates applied out of seq order +0 +0 +ok$/m);
  });

  it('a duplicate of a swept event delivered again is skipped, not counted as a taken seq; verify OK', async () => {
    o.place(3, { sku: 'SKU-D', qty: 2 });
    o.changeQty(1, 4);
    await o.relay();
    await consume();
    await sweepAfterWindow();
    assert.equal(await h.client.hlen('processed'), 0);
    const reserved = await h.client.hgetall('inventory:reserved');
    // The marker expired with the window too: only the seq guard tells the duplicate.
    const first = rowOf('order:1', 1);
    assert.equal(await h.client.exists(`outbox:seen:${first.event_id}`), 0);
    await h.client.lpush('outbox.events', toMessage(first, h.storeId));
    assert.match((await consume()).stdout, /applied 0, duplicates skipped 1, parked 0,/);
    assert.equal(await h.client.hget('outbox:apply-count', first.event_id), null, 'not applied again');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), reserved, 'its effect is not doubled');
    assert.equal(await h.client.hget('outbox:meta', 'takenEvent'), null, 'a swept event is no taken seq');
    const result = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, SWEPT_4);
    assert.match(result.stdout, /^the store is not behind Redis +yes +yes +ok$/m);
  });

  it('database mode: an inbox row whose processed entry was swept is completed, not pending', async () => {
    const consumerDb = join(h.env.dir, 'consumer.db');
    // The library's consumer with the lab's database handlers and a 1 s window; a drain sweeps at its end.
    const drain = async () => {
      const redis = await connectRedis(h.env.redisUrl);
      // Created the first time, as a setup step does: the consumer never creates it (issue 30).
      if (!existsSync(consumerDb)) createConsumerDatabase(consumerDb).close();
      const options = { redis, handlers: orderDatabaseHandlers, database: consumerDb, consumerId: 'db' };
      const consumer = await createConsumer({ ...options, dedupeWindowMs: 1000 });
      try {
        return (await consumer.drain()).applied;
      } finally {
        await consumer.close();
        redis.disconnect();
      }
    };
    o.place(3);
    o.changeQty(2, 6);
    await o.relay();
    assert.equal(await drain(), 4);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    // A database-mode drain does not sweep (the app sweeps on a timer): the library's sweep, as the app runs it.
    const redis = await connectRedis(h.env.redisUrl);
    try {
      assert.equal(await sweepWindow(redis, 1000), 4);
    } finally {
      redis.disconnect();
    }
    assert.equal(await h.client.hlen('processed'), 0, 'the sweep dropped every processed entry');
    assert.equal((await windowHash()).sweptEvents, '4');
    const result = await runCli(['verify', '--settle', '0s', '--consumer-db', consumerDb], h.env);
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /^inbox rows \/ of them committed, completion pending +- +4 \/ 0 +info$/m);
    assert.match(result.stdout, SWEPT_4);
  });

  it('holds Redis no call over 10 ms, reads no growing hash whole: 20,000 events, half swept', async () => {
    const db = openDatabase(h.env.dir);
    try {
      const service = createOrderService(db);
      service.placeOrders(Array.from({ length: 10_000 }, () => ({ sku: 'SKU-S', qty: 1 })));
      await o.relay();
      await consume();
      await sweepAfterWindow();
      service.placeOrders(Array.from({ length: 10_000 }, () => ({ sku: 'SKU-S', qty: 1 })));
    } finally {
      db.close();
    }
    await o.relay();
    // A window longer than this drain, so that the second half keeps its records (the sweep at its end sets it).
    await h.cli('consume', '--dedupe-window', '1h');
    assert.equal(await h.client.hlen('processed'), 10_000);
    assert.equal((await windowHash()).sweptEvents, '10000');
    const { result, slow, whole, calls } = await verifyWatched();
    assert.ok(calls > 20, `verify's calls were logged: ${calls}`);
    assert.deepEqual(whole, [], 'no HGETALL of a hash that grows with history');
    assert.deepEqual(slow, [], 'no call of verify (nor MULTI) held Redis over 10 ms');
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /^records swept by the dedupe window \(1h\) +- +10000 events, applied per/m);
  });

  it('looks for lost events behind a long backlog in MULTIs that each hold Redis a few ms', async () => {
    // Ten events lost from the queue, then a backlog of 60,000 messages (of other aggregates,
    // 200 bytes or so each): the atomic look at each lost event walks the whole queue (LPOS).
    o.place(10);
    await o.relay();
    assert.equal(await h.client.del('outbox.events'), 1);
    const payload = JSON.stringify({ sku: 'SKU-B', qty: 1, note: 'x'.repeat(120) });
    for (let first = 0; first < 60_000; first += 1000) {
      const messages = Array.from({ length: 1000 }, (_, i) => {
        const id = `backlog-${first + i}`;
        return `{"event_id":"${id}","aggregate_id":"other:${first + i}","seq":1,"event_type":"X","payload":${payload}}`;
      });
      await h.client.rpush('outbox.events', ...messages);
    }
    const { result, slow } = await verifyWatched();
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /^events lost \(never applied, not in Redis\) +0 +10 +FAIL$/m);
    assert.deepEqual(slow, [], 'no call of verify (nor MULTI) held Redis over 10 ms');
  });
});
