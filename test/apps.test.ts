import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { PRUNE_QUEUE, PRUNE_SCHEDULER_ID } from '../shared/operations/prune/prune-worker.js';
import { RELAY_QUEUE, RELAY_SCHEDULER_ID } from '../shared/outbox/relay/relay-worker.js';
import { startApp as startAppOn, stopApp as stop, type App } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { defineScripts, moveToProcessing } from '../shared/outbox/redis/scripts.js';
import { count } from './helpers/stores.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

const h = useHarness();

const startApp = (script: string, args: string[] = [], env: Record<string, string> = {}): App => startAppOn(h.env, script, args, env);

const RELAY = 'dist/apps/relay/main.js';
const FAST = ['--every', '300ms', '--slice', '300ms'];

describe('relay app (BullMQ)', () => {
  it('two relay processes never run a pass at the same time, and every row is relayed', async () => {
    const relays = [startApp(RELAY, FAST), startApp(RELAY, FAST)];
    const connection = new Redis(h.env.redisUrl, { maxRetriesPerRequest: null });
    const queue = new Queue(RELAY_QUEUE, { connection });
    try {
      await h.cli('place-order', '--count', '50');
      await waitFor(async () => (await queue.getJobCounts('completed')).completed >= 8, { timeoutMs: 20_000 });
      await h.cli('place-order', '--count', '50');
      await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { timeoutMs: 10_000 });
      assert.equal(await queue.getGlobalConcurrency(), 1);
      const jobs = (await queue.getJobs(['completed'])).sort((a, b) => a.processedOn! - b.processedOn!);
      for (let i = 1; i < jobs.length; i += 1) {
        assert.ok(jobs[i].processedOn! >= jobs[i - 1].finishedOn!, `job ${jobs[i].id} started before job ${jobs[i - 1].id} finished`);
      }
      const unique = new Set((await h.client.lrange('outbox.events', 0, -1)).map((raw) => JSON.parse(raw).event_id));
      assert.equal(unique.size, 100);
      await h.cli('order-check');
    } finally {
      await queue.close();
      connection.disconnect();
      await Promise.all(relays.map((relay) => stop(relay)));
    }
  });

  it('a SIGKILLed relay\'s job is taken over within seconds by another relay', async () => {
    const first = startApp(RELAY, FAST);
    await waitFor(() => /"msg":"relay started"/.test(first.output()));
    const second = startApp(RELAY, FAST);
    try {
      await waitFor(() => /"msg":"relay started"/.test(second.output()));
      first.child.kill('SIGKILL');
      await first.exited;
      await h.cli('place-order', '--count', '5');
      // Default lockDuration 4 s + stalledInterval 2 s: a stalled job is back in well under 15 s.
      await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { timeoutMs: 15_000 });
      assert.equal(await h.client.llen('outbox.events'), 5);
    } finally {
      await stop(second);
    }
  });

  it('stops gracefully on SIGTERM and logs JSON lines without the Redis password', async () => {
    await h.client.config('SET', 'requirepass', 's3cret');
    try {
      const url = h.env.redisUrl.replace('redis://', 'redis://:s3cret@');
      const relay = startApp(RELAY, FAST, { REDIS_URL: url });
      await waitFor(() => /"msg":"relay started"/.test(relay.output()));
      const { code } = await stop(relay);
      assert.equal(code, 0);
      const lines = relay.output().trim().split('\n').map((line) => JSON.parse(line));
      assert.deepEqual(lines.map((l) => l.msg).slice(-2), ['shutting down', 'stopped']);
      assert.ok(lines.every((l) => l.app === 'outbox-relay' && typeof l.time === 'string'));
      assert.ok(relay.output().includes(':***@127.0.0.1'));
      assert.doesNotMatch(relay.output(), /s3cret/);
    } finally {
      const admin = new Redis(h.env.redisUrl, { password: 's3cret' });
      await admin.config('SET', 'requirepass', '');
      admin.disconnect();
    }
  });

  it('re-creates its job schedulers when Redis lost its data and relays again without a restart', async () => {
    const relay = startApp(RELAY, [...FAST, '--prune-older-than', '7d', '--prune-every', '1s']);
    const connection = new Redis(h.env.redisUrl, { maxRetriesPerRequest: null });
    const relayQueue = new Queue(RELAY_QUEUE, { connection });
    const pruneQueue = new Queue(PRUNE_QUEUE, { connection });
    try {
      await waitFor(() => /"msg":"relay started"/.test(relay.output()));
      await h.client.flushall();
      const placed = await h.cli('place-order');
      const eventId = /event ([0-9a-f-]{36})/.exec(placed.stdout)![1];
      await waitFor(async () => (await h.client.lrange('outbox.events', 0, -1)).some((raw) => JSON.parse(raw).event_id === eventId), {
        timeoutMs: 10_000,
        message: 'the order placed after FLUSHALL was not relayed',
      });
      await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE event_id = ? AND status = 'PUBLISHED'", eventId) === 1);
      await waitFor(() => /"msg":"prune job scheduler was missing \(Redis lost its data\?\): re-created"/.test(relay.output()));
      assert.deepEqual([relay.child.exitCode, relay.child.signalCode], [null, null], 'the relay process was not restarted');
      assert.match(relay.output(), /"msg":"relay job scheduler was missing \(Redis lost its data\?\): re-created"/);
      assert.ok(await relayQueue.getJobScheduler(RELAY_SCHEDULER_ID));
      assert.ok(await pruneQueue.getJobScheduler(PRUNE_SCHEDULER_ID));
      assert.deepEqual([await relayQueue.getGlobalConcurrency(), await pruneQueue.getGlobalConcurrency()], [1, 1]);
    } finally {
      await relayQueue.close();
      await pruneQueue.close();
      connection.disconnect();
      await stop(relay);
    }
  });

  it('waits for Redis at start, and stops at once on SIGINT while waiting', async () => {
    const relay = startApp(RELAY, FAST, { REDIS_URL: 'redis://127.0.0.1:1' });
    await waitFor(() => /"msg":"redis unavailable, retrying"/.test(relay.output()));
    const { code } = await stop(relay, 'SIGINT');
    assert.equal(code, 0);
  });
});

describe('consumer app', () => {
  const event = (aggregateId: number) =>
    JSON.stringify({ event_id: `orphan-${aggregateId}`, aggregate_id: `order:${aggregateId}`, seq: 1, event_type: 'OrderPlaced', payload: { orderId: aggregateId, sku: 'SKU-O', qty: 1 }, store_id: h.storeId });

  it('on SIGTERM hands back, in order, what it took but did not apply (an event waiting for a handler retry)', async () => {
    // Order 1's event fails its handler until the test ends, so it waits in the processing list.
    const consumer = startApp('dist/apps/consumer/main.js', [], { OUTBOX_HANDLER_FAIL: `throw-until:${Date.now() + 120_000}@1`, OUTBOX_MAX_ATTEMPTS: '1000' });
    await h.client.rpush('outbox.events', event(1), event(2));
    await waitFor(async () => (await h.client.hlen('processed')) === 1 && /"msg":"handler failed/.test(consumer.output()), {
      message: 'order 2 was not applied, or order 1 did not fail',
    });
    assert.equal(await h.client.llen('outbox.events:processing:consumer-0'), 1);
    assert.equal((await stop(consumer)).code, 0);
    const stopped = JSON.parse(consumer.output().split('\n').find((line) => line.includes('"msg":"consumer stopped"'))!);
    assert.equal(stopped.handedBack, 1);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), [event(1)]);
    assert.equal(await h.client.llen('outbox.events:processing:consumer-0'), 0);
  });

  it('reclaims the processing list of a consumer that is gone, and leaves a live one alone: every 10 s from the lists the takes recorded, without scanning the keyspace; at start also one no take recorded', async () => {
    defineScripts(h.client);
    // Before the consumer starts: a list no take recorded (written before the set existed, or after
    // it was lost), found by the scan a consumer makes at start; and a live consumer's list.
    await h.client.rpush('outbox.events:processing:unrecorded', event(1));
    await h.client.rpush('outbox.events', event(3));
    assert.equal((await moveToProcessing(h.client, 'outbox.events:processing:alive', 1)).length, 1);
    await h.client.set('outbox:consumer-alive:alive', '1', 'PX', 60_000);
    // A week of dedupe markers fills the keyspace: the reclaim every 10 s must not walk it.
    const pipeline = h.client.pipeline();
    for (let i = 0; i < 50_000; i += 1) pipeline.set(`outbox:seen:old-${i}`, '1', 'EX', 600);
    await pipeline.exec();
    const consumer = startApp('dist/apps/consumer/main.js');
    try {
      await waitFor(async () => (await h.client.hlen('processed')) === 1, { message: 'the unrecorded list was not reclaimed at start' });
      assert.equal(await h.client.llen('outbox.events:processing:unrecorded'), 0);
      await h.client.config('RESETSTAT');
      // Then a consumer that took (recorded, as every take is) and died: a periodic pass finds it.
      await h.client.rpush('outbox.events:processing:ghost', event(2));
      await h.client.sadd('outbox:processing-lists', 'outbox.events:processing:ghost');
      await waitFor(async () => (await h.client.hlen('processed')) === 2, { timeoutMs: 15_000, message: 'the orphaned messages were not applied' });
      assert.deepEqual((await h.client.hkeys('processed')).sort(), ['orphan-1', 'orphan-2']);
      assert.equal(await h.client.llen('outbox.events:processing:ghost'), 0);
      assert.deepEqual(await h.client.lrange('outbox.events:processing:alive', 0, -1), [event(3)]);
      assert.match(consumer.output(), /"msg":"reclaimed the processing list of a consumer that is gone","processingList":"outbox\.events:processing:ghost","count":1/);
      assert.doesNotMatch(await h.client.info('commandstats'), /cmdstat_scan:/, 'a periodic reclaim scanned the keyspace');
      assert.deepEqual((await h.client.smembers('outbox:processing-lists')).sort(), ['alive', 'consumer-0', 'ghost', 'unrecorded'].map((id) => `outbox.events:processing:${id}`));
      assert.equal(await h.client.exists('outbox:consumer-alive:consumer-0'), 1, 'the app keeps its own heartbeat');
    } finally {
      await stop(consumer);
    }
    assert.equal(await h.client.exists('outbox:consumer-alive:consumer-0'), 0, 'a stopped consumer removes its heartbeat');
  });
});

describe('shutdown', () => {
  const FIXTURE = 'dist/test/fixtures/app-with-close.js';

  it('closes and exits 0 on SIGTERM', async () => {
    const app = startApp(FIXTURE, [], { CLOSE: 'ok' });
    await waitFor(() => app.output().includes('"ready"'));
    assert.equal((await stop(app)).code, 0);
    assert.match(app.output(), /"msg":"stopped","reason":"SIGTERM"/);
  });

  it('exits 1 when closing takes longer than the deadline', async () => {
    const app = startApp(FIXTURE, [], { CLOSE: 'hang', DEADLINE_MS: '300' });
    await waitFor(() => app.output().includes('"ready"'));
    assert.equal((await stop(app)).code, 1);
    assert.match(app.output(), /"msg":"shutdown deadline passed: exiting with work unfinished"/);
  });

  it('exits at once on a second signal', async () => {
    const app = startApp(FIXTURE, [], { CLOSE: 'hang', DEADLINE_MS: '60000' });
    await waitFor(() => app.output().includes('"ready"'));
    app.child.kill('SIGINT');
    await waitFor(() => app.output().includes('"shutting down"'));
    app.child.kill('SIGINT');
    assert.equal((await app.exited).code, 130);
    assert.match(app.output(), /"msg":"second signal: exiting now"/);
  });
});
