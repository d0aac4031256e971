import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { createConsumerEngine } from '../shared/outbox/consumer/consumer.js';
import { runRedisHandlers } from '../shared/outbox/consumer/run-redis-handlers.js';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import type { OutboxEvent } from '../shared/outbox/store/events.js';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { createOrderService, type OrderService } from '../shared/lab/orders/order-service.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { createConsumer } from '../shared/outbox/index.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { guardOf } from './helpers/guards.js';

const h = useHarness();
const o = orders(() => h.env);
const CONSUMER = 'dist/apps/consumer/main.js';

interface App {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function startConsumerApp(env: Record<string, string> = {}): App {
  const child = spawn(process.execPath, [join(REPO_ROOT, CONSUMER)], {
    env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl, OUTBOX_CRASH_POINTS: '', OUTBOX_HANDLER_FAIL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

async function stop(app: App): Promise<number | null> {
  if (app.child.exitCode === null && app.child.signalCode === null) app.child.kill('SIGTERM');
  return app.exited;
}

/** Runs `write` on the test's app.db, then relays everything PENDING (in this process: fast and in id order). */
async function writeAndRelay(write: (orders: OrderService) => void): Promise<void> {
  const db = openDatabase(h.env.dir);
  const redis = await connectRedis(h.env.redisUrl);
  try {
    write(createOrderService(db));
    await createRelay(db, redis).relayAll();
  } finally {
    db.close();
    redis.disconnect();
  }
}

/**
 * Four orders whose events must apply in seq order: order 1 has seq 1-4 (two quantity changes and
 * a cancel), order 2 seq 1-2, order 3 seq 1-2 (cancelled), order 4 seq 1. Nine events.
 */
function lifecycle(orders: OrderService): void {
  orders.placeOrders([
    { sku: 'SKU-A', qty: 2 },
    { sku: 'SKU-B', qty: 1 },
    { sku: 'SKU-A', qty: 4 },
    { sku: 'SKU-C', qty: 7 },
  ]);
  orders.changeQty(1, 5);
  orders.changeQty(2, 3);
  orders.cancelOrder(3);
  orders.changeQty(1, 6);
  orders.cancelOrder(1);
}
const EVENTS = 9;

/** Every event of order `aggregateId`, in the order the consumer applied them (from `processed`). */
async function appliedSeqs(aggregateId: number): Promise<number[]> {
  const processed = Object.values(await h.client.hgetall('processed')).map((v) => JSON.parse(v) as { aggregate: string; seq: number; applyOrder: number });
  return processed
    .filter((p) => p.aggregate === `order:${aggregateId}`)
    .sort((a, b) => a.applyOrder - b.applyOrder)
    .map((p) => p.seq);
}

async function assertAllAppliedInOrder(): Promise<void> {
  assert.equal(await h.client.hlen('processed'), EVENTS);
  assert.deepEqual(await appliedSeqs(1), [1, 2, 3, 4]);
  assert.deepEqual(await appliedSeqs(2), [1, 2]);
  assert.deepEqual(await appliedSeqs(3), [1, 2]);
  assert.equal(await h.client.llen('outbox.events:dead'), 0, 'nothing dead-lettered');
  assert.equal(await h.client.hlen('outbox.events:parked'), 0, 'nothing left parked');
  assert.equal(await h.client.exists('outbox:attempts'), 0, 'attempt counts cleared once applied');
  await o.verify();
}

const parkedFields = async () => (await h.client.hkeys('outbox.events:parked')).sort();

describe('consumer app: a failing handler is retried, a poison event dead-lettered', () => {
  it('retries every event whose handler throws on its first 2 attempts, and applies each aggregate in seq order', async () => {
    await writeAndRelay(lifecycle);
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'throw-first:2' });
    try {
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS, { message: 'not every event was applied' });
      await waitFor(async () => (await h.client.exists('outbox:attempts')) === 0);
    } finally {
      assert.equal(await stop(app), 0);
    }
    await assertAllAppliedInOrder();
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), String(2 * EVENTS), 'each event failed exactly twice');
    assert.match(app.output(), /"msg":"handler failed: the event waits in the processing list for its next attempt".*"attempt":2,"error":"injected failure \(OUTBOX_HANDLER_FAIL\) at attempt 2"/);
  });

  it('parks the later events of an aggregate whose event waits for a retry (same round and later rounds), then releases them in order', async () => {
    await writeAndRelay((orders) => {
      orders.placeOrders([
        { sku: 'SKU-A', qty: 2 },
        { sku: 'SKU-B', qty: 1 },
      ]);
      orders.changeQty(1, 5);
      orders.changeQty(1, 6);
      orders.changeQty(2, 4);
    });
    // Order 1's seq 2 fails its first 4 attempts: it waits about 1.5 s in all.
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'throw-first:4@1:2' });
    try {
      // Taken in the same round as seq 2, seq 3 is parked behind it; order 2 flows on.
      await waitFor(async () => (await parkedFields()).includes('order:1:3'), { message: 'seq 3 was not parked behind the waiting seq 2' });
      await waitFor(async () => (await guardOf(h.client, 'order:2')) === '2');
      assert.equal(await guardOf(h.client, 'order:1'), '1');
      assert.ok(Number(await h.client.hget('outbox:attempts', (await eventIdOf(1, 2))!)) >= 1, 'the failed attempts are counted in Redis');
      assert.equal(await h.client.llen('outbox.events:processing:consumer-0'), 1, 'the waiting event stays in the processing list');
      // seq 4 arrives in a later round while seq 2 still waits: parked too.
      await writeAndRelay((orders) => orders.cancelOrder(1));
      await waitFor(async () => (await parkedFields()).includes('order:1:4'), { message: 'seq 4 was not parked behind the waiting seq 2' });
      assert.equal(await guardOf(h.client, 'order:1'), '1', 'seq 2 still waits (the test must reach this before its retry succeeds)');
      await waitFor(async () => (await guardOf(h.client, 'order:1')) === '4', { message: 'order 1 was not released' });
    } finally {
      assert.equal(await stop(app), 0);
    }
    assert.deepEqual(await appliedSeqs(1), [1, 2, 3, 4]);
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), '4');
    assert.equal(await h.client.hget('outbox:stats', 'unparked'), '2');
    assert.equal(await h.client.llen('outbox.events:dead'), 0);
    assert.equal(await h.client.exists('outbox:attempts'), 0);
    await o.verify();
  });

  it('retries every event of a lane whose worker thread died, each counting one attempt', async () => {
    await writeAndRelay(lifecycle);
    // Every first attempt kills its thread: each lane task of the first round is lost.
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'crash-first:1', OUTBOX_HANDLER_THREADS: '2' });
    try {
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS, { message: 'not every event was applied' });
    } finally {
      assert.equal(await stop(app), 0);
    }
    await assertAllAppliedInOrder();
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), String(EVENTS), 'one lost attempt per event of the lost lanes');
    assert.match(app.output(), /"error":"handler task lost: worker exited with code: 1"/);
  });

  it('switches injected failures on and off through OUTBOX_HANDLER_FAIL_FILE while it runs, ignoring a bad spec in it', async () => {
    await writeAndRelay(lifecycle);
    const file = join(h.env.dir, 'handler-fail');
    writeFileSync(file, 'throw:1');
    // Many attempts allowed: the events must wait, not be dead-lettered, while the file exists.
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL_FILE: file, OUTBOX_MAX_ATTEMPTS: '1000' });
    try {
      await waitFor(async () => Number(await h.client.hget('outbox:stats', 'handlerFailures')) >= EVENTS, { message: 'the file did not switch failures on' });
      assert.equal(await h.client.hlen('processed'), 0, 'nothing applied while every attempt fails');
      writeFileSync(file, 'throw:maybe');
      await waitFor(async () => app.output().includes('OUTBOX_HANDLER_FAIL_FILE'), { message: 'the bad spec was not logged' });
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS, { message: 'a bad spec did not switch failures off' });
    } finally {
      rmSync(file, { force: true });
      assert.equal(await stop(app), 0);
    }
    await assertAllAppliedInOrder();
    assert.match(app.output(), /"level":"warn".*"msg":"OUTBOX_HANDLER_FAIL_FILE \([^)]*\) must be <throw\|crash\|hang>:<probability 0-1>/);
  });

  it('dead-letters alone an event that always kills its thread: the other events of its lane are applied', async () => {
    await writeAndRelay(lifecycle);
    // One thread, so one lane holds every event; order 3's seq 2 kills it at every attempt.
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'crash:1@3:2', OUTBOX_HANDLER_THREADS: '1' });
    try {
      // Five lost threads, each replaced by one that loads the handler module again, and four
      // backoffs (1.5 s in all): the test takes about 5 s on a quiet machine, the wait over 10 s at a load average of 10.
      await waitFor(async () => (await h.client.llen('outbox.events:dead')) === 1, { message: 'order 3 seq 2 was not dead-lettered', timeoutMs: 30_000 });
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS - 1, { message: 'the lane-mates of the poison event were not applied' });
    } finally {
      assert.equal(await stop(app), 0);
    }
    const [dead] = (await h.client.lrange('outbox.events:dead', 0, -1)).map((e) => JSON.parse(e) as { reason: string; message: string });
    assert.equal(dead.reason, 'handler failed 5 times: handler task lost: worker exited with code: 1');
    assert.deepEqual([JSON.parse(dead.message).aggregate_id, JSON.parse(dead.message).seq], ['order:3', 2]);
    assert.deepEqual(await appliedSeqs(1), [1, 2, 3, 4]);
    // The first lost task cost every event of the lane one attempt; the poison event alone the next four.
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), String(EVENTS + 4));
  });

  it('stops a handler that hangs after --handler-timeout and retries its lane', async () => {
    await writeAndRelay(lifecycle);
    const app = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'hang-first:1@1:1', OUTBOX_HANDLER_TIMEOUT: '1s' });
    try {
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS, { message: 'not every event was applied' });
    } finally {
      assert.equal(await stop(app), 0);
    }
    await assertAllAppliedInOrder();
    assert.match(app.output(), /"aggregateId":"order:1","seq":1,"attempt":1,"error":"handler timed out after 1000 ms \(its worker thread was stopped\)"/);
  });

  it('dead-letters an event after --max-attempts, parks its successors, names the blocked order, and dead-letter retry releases them in order', async () => {
    await writeAndRelay(lifecycle);
    const sick = startConsumerApp({ OUTBOX_HANDLER_FAIL: 'throw:1@1:2' });
    try {
      await waitFor(async () => (await h.client.llen('outbox.events:dead')) === 1, { message: 'order 1 seq 2 was not dead-lettered' });
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS - 3);
    } finally {
      assert.equal(await stop(sick), 0);
    }
    const [dead] = (await h.client.lrange('outbox.events:dead', 0, -1)).map((e) => JSON.parse(e) as { reason: string; message: string });
    assert.equal(dead.reason, 'handler failed 5 times: injected failure (OUTBOX_HANDLER_FAIL) at attempt 5');
    assert.equal(JSON.parse(dead.message).seq, 2);
    assert.equal(await h.client.exists('outbox:attempts'), 0, 'the count is cleared once dead-lettered');
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), '5');
    assert.deepEqual(await parkedFields(), ['order:1:3', 'order:1:4']);
    assert.equal(await guardOf(h.client, 'order:1'), '1');
    assert.deepEqual(await appliedSeqs(2), [1, 2], 'other orders are applied');
    assert.deepEqual(await appliedSeqs(3), [1, 2]);
    assert.match(sick.output(), /"msg":"dead-lettered","reason":"handler failed 5 times: /);

    const status = await h.cli('status');
    assert.match(status.stdout, /^blocked     order:1 \(seq 2 dead-lettered, 2 waiting: seq 3, 4\)/m);
    const json = JSON.parse((await h.cli('status', '--json')).stdout);
    assert.deepEqual(json.blocked, [{ aggregateId: 'order:1', deadSeq: 2, waitingSeqs: [3, 4] }]);
    // verify fails until it is retried, but calls it neither lost nor in flight: it does not wait out
    // its window for the dead letter and the events parked behind it.
    const verify = await runCli(['verify', '--settle', '20s'], h.env);
    assert.equal(verify.code, 1, verify.stdout + verify.stderr);
    assert.doesNotMatch(verify.stderr, /in flight at the snapshot; waiting/);
    assert.match(verify.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    assert.match(verify.stdout, /^dead-lettered entries +- +1 +info$/m);
    assert.doesNotMatch(verify.stdout, /^in flight at the snapshot/m);

    const healthy = startConsumerApp();
    try {
      await h.cli('dead-letter', 'retry', '--all');
      await waitFor(async () => (await h.client.hlen('processed')) === EVENTS, { message: 'the retried dead letter did not release order 1' });
    } finally {
      assert.equal(await stop(healthy), 0);
    }
    await assertAllAppliedInOrder();
    assert.doesNotMatch((await h.cli('status')).stdout, /^blocked/m);
  });

  it('keeps a waiting event and its attempt count across a SIGKILL: the restarted consumer goes on counting', async () => {
    await writeAndRelay(lifecycle);
    const env = { OUTBOX_HANDLER_FAIL: 'throw:1@1:2', OUTBOX_MAX_ATTEMPTS: '5' };
    const first = startConsumerApp(env);
    await waitFor(async () => Number(await h.client.hget('outbox:stats', 'handlerFailures')) >= 2);
    first.child.kill('SIGKILL');
    await first.exited;
    const counted = Number(await h.client.hget('outbox:stats', 'handlerFailures'));
    assert.ok(counted < 5, 'killed before the last attempt');
    const waiting = await h.client.lrange('outbox.events:processing:consumer-0', 0, -1);
    assert.deepEqual(waiting.map((raw) => [JSON.parse(raw).aggregate_id, JSON.parse(raw).seq]), [['order:1', 2]], 'the waiting event is still in the processing list');
    assert.equal(await h.client.hget('outbox:attempts', JSON.parse(waiting[0]).event_id), String(counted));

    const second = startConsumerApp(env);
    try {
      await waitFor(async () => (await h.client.llen('outbox.events:dead')) === 1, { message: 'not dead-lettered after the restart' });
    } finally {
      assert.equal(await stop(second), 0);
    }
    assert.match(second.output(), /"msg":"processing list recovered"/);
    assert.equal(JSON.parse((await h.client.lindex('outbox.events:dead', 0))!).reason, 'handler failed 5 times: injected failure (OUTBOX_HANDLER_FAIL) at attempt 5');
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), '5', 'attempts before and after the crash add up to the limit');
  });

  it('refuses a bad OUTBOX_HANDLER_FAIL or OUTBOX_MAX_ATTEMPTS in one line, exit 78', async () => {
    for (const [env, pattern] of [
      [{ OUTBOX_HANDLER_FAIL: 'explode:2' }, /"msg":"OUTBOX_HANDLER_FAIL must be .*got \\"explode:2\\": fix it, or unset it/],
      [{ OUTBOX_MAX_ATTEMPTS: '0' }, /"msg":"OUTBOX_MAX_ATTEMPTS must be a whole number from 1 to 1000, got \\"0\\""/],
    ] as const) {
      const app = startConsumerApp(env);
      assert.equal(await app.exited, 78);
      assert.match(app.output(), pattern);
      assert.doesNotMatch(app.output(), /\n\s+at /, 'no stack trace');
    }
  });
});

async function eventIdOf(aggregateId: number, seq: number): Promise<string | undefined> {
  for (const raw of await h.client.lrange('outbox.events:processing:consumer-0', 0, -1)) {
    const message = JSON.parse(raw) as { event_id: string; aggregate_id: string; seq: number };
    if (message.aggregate_id === `order:${aggregateId}` && message.seq === seq) return message.event_id;
  }
  return undefined;
}

describe('outbox consume: events waiting for a retry', () => {
  /** A handler that fails order 1's seq 2 on its first `failures` attempts. */
  const failingSeq2 = (failures: number) => (events: OutboxEvent[], attempts: number[]) =>
    events.map((event, i) => (event.aggregateId === 'order:1' && event.seq === 2 && attempts[i] <= failures ? { error: `attempt ${attempts[i]} failed` } : runRedisHandlers(handlers, [event])[0]));

  it('retries within the same run after the backoff and ends once the event is applied', async () => {
    await writeAndRelay(lifecycle);
    const redis = await connectRedis(h.env.redisUrl);
    try {
      const stats = await createConsumerEngine(redis, { handler: failingSeq2(2) }).drain();
      assert.equal(stats.retried, 2);
      assert.equal(stats.dead, 0);
    } finally {
      redis.disconnect();
    }
    await assertAllAppliedInOrder();
  });

  it('ends after --max-attempts with the event dead-lettered and its successors parked', async () => {
    await writeAndRelay(lifecycle);
    const redis = await connectRedis(h.env.redisUrl);
    try {
      const stats = await createConsumerEngine(redis, { handler: failingSeq2(Infinity), maxAttempts: 3 }).drain();
      assert.deepEqual([stats.retried, stats.dead, stats.applied], [2, 1, EVENTS - 3]);
    } finally {
      redis.disconnect();
    }
    assert.equal(JSON.parse((await h.client.lindex('outbox.events:dead', 0))!).reason, 'handler failed 3 times: attempt 3 failed');
    assert.deepEqual(await parkedFields(), ['order:1:3', 'order:1:4']);
    assert.equal(await h.client.llen('outbox.events:processing:cli'), 0);
    // The CLI (default handler) then applies the retried dead letter and what waited behind it.
    await h.cli('dead-letter', 'retry', '--all');
    assert.match((await runCli(['consume'], h.env)).stdout, /applied 3/);
    await assertAllAppliedInOrder();
  });
});

describe('handler timeout on a pool with more tasks than threads', () => {
  it('counts from when a thread starts the task, not from when it was sent: tasks queued behind others past the timeout are not stopped', async () => {
    // Eight orders, one per lane (laneOf spreads order:1-8 over 8 lanes), on one thread: 8 tasks of
    // 250 ms queued at once, 2 s in all against a 1 s timeout. Each runs for 250 ms; counted from
    // the send, the later ones would be stopped before they ran and retried.
    await writeAndRelay((orders) => orders.placeOrders(Array.from({ length: 8 }, () => ({ sku: 'SKU-A', qty: 1 }))));
    const redis = await connectRedis(h.env.redisUrl);
    const consumer = await createConsumer({
      redis,
      handlers: new URL('../shared/lab/orders/order-handlers.js', import.meta.url),
      threads: 1,
      lanes: 8,
      cpuCostMs: 250,
      handlerTimeoutMs: 1000,
    });
    try {
      const stats = await consumer.drain();
      assert.deepEqual([stats.applied, stats.failed, stats.retried, stats.dead], [8, 0, 0, 0]);
    } finally {
      await consumer.close();
      redis.disconnect();
    }
    assert.equal(await h.client.hget('outbox:stats', 'handlerFailures'), null, 'no handler failed');
  });

  it('still stops a task that runs past the timeout once started', async () => {
    await writeAndRelay((orders) => orders.placeOrders([{ sku: 'SKU-A', qty: 1 }]));
    const redis = await connectRedis(h.env.redisUrl);
    // 600 ms of work against a 300 ms timeout: every attempt is stopped; the third dead-letters it.
    const consumer = await createConsumer({ redis, handlers: new URL('../shared/lab/orders/order-handlers.js', import.meta.url), threads: 1, cpuCostMs: 600, handlerTimeoutMs: 300, maxAttempts: 3 });
    try {
      const stats = await consumer.drain();
      assert.deepEqual([stats.applied, stats.failed, stats.dead], [0, 3, 1]);
    } finally {
      await consumer.close();
      redis.disconnect();
    }
    assert.match(JSON.parse((await h.client.lindex('outbox.events:dead', 0))!).reason, /^handler failed 3 times: handler timed out after 300 ms \(its worker thread was stopped\)$/);
  });
});
