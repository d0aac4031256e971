import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { readHeartbeats } from '../shared/outbox/consumer/heartbeats.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';

// Issue 10, "real health": health endpoints, consumer heartbeats, per-app health in status, the stats line.
const h = useHarness();
const o = orders(() => h.env);

const PRODUCER = 'dist/apps/producer/main.js';
const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';

interface Health {
  status: number;
  body: any;
}

async function health(port: number, method = 'GET'): Promise<Health> {
  const response = await fetch(`http://127.0.0.1:${port}/healthz`, { method, signal: AbortSignal.timeout(2000) });
  return { status: response.status, body: method === 'HEAD' ? await response.text() : await response.json() };
}

/** Waits until the endpoint on `port` answers `status`; resolves that answer. */
const healthIs = (port: number, status: number, message: string) =>
  waitFor(async () => {
    const answer = await health(port).catch(() => undefined);
    return answer?.status === status ? answer : undefined;
  }, { timeoutMs: 15_000, message }) as Promise<Health>;

const removeDatabase = (dir: string) => {
  for (const suffix of ['', '-wal', '-shm']) rmSync(join(dir, `app.db${suffix}`), { force: true });
};

/** The JSON lines of `app` whose msg is `msg`. */
const linesOf = (app: App, msg: string) =>
  app
    .output()
    .split('\n')
    .filter((line) => line.includes(`"msg":"${msg}"`))
    .map((line) => JSON.parse(line));

async function startWithHealth(script: string, env: Record<string, string>, port: number): Promise<App> {
  const app = startApp(h.env, script, [], env);
  await waitFor(() => /"msg":"health endpoint listening"/.test(app.output()) || app.child.exitCode !== null, { message: `${script} did not listen` });
  assert.match(app.output(), new RegExp(`"url":"http://127.0.0.1:${port}/healthz"`));
  return app;
}

const startRelay = async (port: number, extra: Record<string, string> = {}) =>
  startWithHealth(RELAY, { OUTBOX_RELAY_HEALTH_PORT: String(port), ...extra }, port);
const startConsumer = async (port: number, extra: Record<string, string> = {}) =>
  startWithHealth(CONSUMER, { OUTBOX_CONSUMER_HEALTH_PORT: String(port), OUTBOX_HANDLER_THREADS: '1', ...extra }, port);

describe('health endpoints', () => {
  it('producer: 200 naming the live store when app.db takes writes; 503 with the reason once app.db is deleted', async () => {
    const port = await freePort();
    const producer = startApp(h.env, PRODUCER, [], { PORT: String(port) });
    try {
      await waitFor(() => /"msg":"producer listening"/.test(producer.output()), { message: 'producer not listening' });
      const fine = await health(port);
      assert.equal(fine.status, 200);
      assert.equal(fine.body.ok, true);
      assert.equal(fine.body.app, 'outbox-producer');
      assert.equal(fine.body.checks.database.storeId, h.storeId);
      assert.equal(fine.body.checks.database.path, join(h.env.dir, 'app.db'));
      assert.ok(fine.body.checks.database.freeBytes > 0);
      assert.equal((await health(port, 'HEAD')).status, 200);

      removeDatabase(h.env.dir);
      const gone = await healthIs(port, 503, 'the producer stayed healthy without app.db');
      assert.equal(gone.body.ok, false);
      assert.match(gone.body.reason, /app\.db was deleted or replaced under the producer/);
      assert.equal(gone.body.checks.database.ok, false);
      assert.equal((await health(port, 'HEAD')).status, 503);
    } finally {
      await stopApp(producer);
    }
  });

  it('relay: 200 with Redis, app.db, the paired store and its last pass; 503 with the reason when Redis stops or app.db is deleted', async () => {
    const port = await freePort();
    const relay = await startRelay(port);
    try {
      const fine = await healthIs(port, 200, 'the relay never became healthy');
      assert.deepEqual(
        Object.entries(fine.body.checks).map(([name, check]: [string, any]) => [name, check.ok]),
        [['redis', true], ['database', true], ['store', true], ['passes', true]],
      );
      assert.equal(fine.body.checks.store.servedStore, h.storeId);
      await waitFor(async () => (await health(port)).body.checks.passes.lastPassAgeMs !== null, { message: 'no relay pass recorded' });
      const passed = await health(port);
      assert.ok(passed.body.checks.passes.lastPassAgeMs < 5000, `last pass ${passed.body.checks.passes.lastPassAgeMs} ms ago`);
      assert.equal(passed.body.checks.passes.own.lastPass.outcome, 'ok');

      await h.redis.stop();
      const noRedis = await healthIs(port, 503, 'the relay stayed healthy without Redis');
      assert.match(noRedis.body.reason, /Redis unreachable/);
      assert.equal(noRedis.body.checks.database.ok, true, 'app.db is still fine');
      await h.redis.resume();
      await healthIs(port, 200, 'the relay did not recover with Redis');

      removeDatabase(h.env.dir);
      const noDatabase = await healthIs(port, 503, 'the relay stayed healthy without app.db');
      assert.match(noDatabase.body.reason, /app\.db was deleted or replaced under the relay/);
      assert.equal(noDatabase.body.checks.redis.ok, true);
    } finally {
      await stopApp(relay);
    }
  });

  it('relay: 503 when Redis serves another store than app.db', async () => {
    await h.client.hset('outbox:meta', 'store', 'another-store');
    const port = await freePort();
    const relay = await startRelay(port);
    try {
      const refused = await healthIs(port, 503, 'the relay was healthy on a foreign Redis');
      assert.match(refused.body.reason, /Redis serves another store, another-store/);
    } finally {
      await stopApp(relay);
    }
  });

  it('consumer: 200 with Redis, its heartbeat and lag; 503 with the reason while Redis is stopped', async () => {
    const port = await freePort();
    const consumer = await startConsumer(port);
    try {
      const fine = await healthIs(port, 200, 'the consumer never became healthy');
      assert.equal(fine.body.checks.heartbeat.consumerId, 'consumer-0');
      assert.ok(fine.body.checks.lag.lagMs < 1000, `nothing waits, yet a lag of ${fine.body.checks.lag.lagMs} ms`);
      assert.equal(fine.body.checks.lag.queued, 0);
      await h.redis.stop();
      const down = await healthIs(port, 503, 'the consumer stayed healthy without Redis');
      assert.match(down.body.reason, /Redis unreachable/);
      await h.redis.resume();
      await healthIs(port, 200, 'the consumer did not recover with Redis');
    } finally {
      await stopApp(consumer);
    }
  });

  it('a health port that is not a port is refused (exit 78) with one line naming the setting; a port in use leaves the app running without it', async () => {
    const bad = startApp(h.env, RELAY, [], { OUTBOX_RELAY_HEALTH_PORT: '30o1' });
    const { code } = await bad.exited;
    assert.equal(code, 78);
    assert.match(bad.output(), /"msg":"OUTBOX_RELAY_HEALTH_PORT must be a port from 1 to 65535, or off, got \\"30o1\\""/);
    assert.equal(bad.output().trim().split('\n').length, 1, bad.output());

    const port = await freePort();
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(port, '127.0.0.1', resolve));
    const consumer = startApp(h.env, CONSUMER, [], { OUTBOX_CONSUMER_HEALTH_PORT: String(port) });
    try {
      await waitFor(() => /"msg":"consumer started"/.test(consumer.output()), { message: 'the consumer did not start' });
      assert.match(consumer.output(), new RegExp(`"msg":"health endpoint not started: 127.0.0.1:${port} is in use: set OUTBOX_CONSUMER_HEALTH_PORT to a free port, or off"`));
      assert.equal(consumer.child.exitCode, null, 'the consumer runs on');
    } finally {
      await stopApp(consumer);
      taken.close();
    }
  });

  it('under pm2 instances each relay listens on the base port plus its instance number', async () => {
    const base = await freePort();
    const relay = await startWithHealth(RELAY, { OUTBOX_RELAY_HEALTH_PORT: String(base - 1), NODE_APP_INSTANCE: '1' }, base);
    try {
      assert.equal((await health(base)).body.pid, relay.child.pid);
    } finally {
      await stopApp(relay);
    }
  });
});

describe('consumer heartbeats and outbox status', () => {
  it('the heartbeat appears in outbox:consumers, ages while the consumer is SIGSTOPped, and status shows it stale and the consumer not answering', async () => {
    const relayPort = await freePort();
    const consumerPort = await freePort();
    const producerPort = await freePort();
    const env = { PORT: String(producerPort), OUTBOX_RELAY_HEALTH_PORT: String(relayPort), OUTBOX_CONSUMER_HEALTH_PORT: String(consumerPort) };
    const producer = startApp(h.env, PRODUCER, [], env);
    const relay = await startRelay(relayPort);
    const consumer = await startConsumer(consumerPort);
    const status = async () => {
      const result = await runCli(['status', '--json'], { ...h.env, env });
      assert.equal(result.code, 0, result.stderr);
      return JSON.parse(result.stdout);
    };
    try {
      o.place(5);
      const beat = await waitFor(
        async () => {
          const raw = await h.client.hget('outbox:consumers', 'consumer-0');
          const parsed = raw ? JSON.parse(raw) : undefined;
          return parsed?.applied === 5 ? parsed : undefined;
        },
        { timeoutMs: 15_000, message: 'no heartbeat with the 5 applied events' },
      );
      assert.equal(beat.pid, consumer.child.pid);
      assert.equal(beat.health, `http://127.0.0.1:${consumerPort}/healthz`);
      assert.equal(beat.queued, 0);

      await waitFor(async () => (await status()).apps.every((a: any) => a.state === 'ok'), { timeoutMs: 15_000, message: 'not every app healthy in status' });
      const healthy = await status();
      assert.deepEqual(
        healthy.apps.map((a: any) => [a.app, a.url, a.state]),
        [
          ['outbox-producer', `http://127.0.0.1:${producerPort}/healthz`, 'ok'],
          ['outbox-relay', `http://127.0.0.1:${relayPort}/healthz`, 'ok'],
          ['outbox-consumer', `http://127.0.0.1:${consumerPort}/healthz`, 'ok'],
        ],
      );
      assert.deepEqual(
        healthy.consumers.map((c: any) => [c.consumerId, c.state, c.pid, c.applied]),
        [['consumer-0', 'alive', consumer.child.pid, 5]],
      );
      // Each probe has 500 ms: on a loaded machine one may miss it, so the text is awaited too.
      const lines = [
        new RegExp(`^apps +outbox-producer 127.0.0.1:${producerPort}/healthz: ok \\(pid \\d+\\)$`, 'm'),
        /^ +outbox-relay 127.0.0.1:\d+\/healthz: ok \(pid \d+, last relay pass [\d.]+ m?s ago\)$/m,
        /^ +outbox-consumer 127.0.0.1:\d+\/healthz: ok \(pid \d+, lag \d+ ms, queued 0\)$/m,
        /^heartbeats +consumer-0 pid \d+: heartbeat [\d.]+ m?s ago, applied 5, lag \d+ ms, queued 0$/m,
      ];
      let text = '';
      await waitFor(
        async () => {
          text = (await runCli(['status'], { ...h.env, env })).stdout;
          return lines.every((line) => line.test(text));
        },
        { timeoutMs: 15_000, message: `status text: ${text}` },
      ).catch((error) => assert.fail(`${error.message}: ${text}`));

      const started = Date.now();
      consumer.child.kill('SIGSTOP');
      // Awaited in this process (an `outbox status` a second for 15 s cost 3 s of CPU), then shown by status.
      await waitFor(async () => (await readHeartbeats(h.client))[0]?.state === 'stale', {
        timeoutMs: 25_000,
        intervalMs: 250,
        message: 'the heartbeat of a stopped consumer never went stale',
      });
      const stale = await status();
      assert.equal(stale.consumers[0].state, 'stale');
      assert.ok(Date.now() - started < 20_000);
      assert.ok(JSON.parse((await h.client.hget('outbox:consumers', 'consumer-0'))!).at <= started, 'no beat while stopped');
      assert.ok(stale.consumers[0].ageMs > 15_000, `age ${stale.consumers[0].ageMs}`);
      const consumerHealth = stale.apps.find((a: any) => a.app === 'outbox-consumer');
      assert.equal(consumerHealth.state, 'no answer');
      const staleText = await runCli(['status'], { ...h.env, env });
      assert.match(staleText.stdout, /outbox-consumer 127.0.0.1:\d+\/healthz: not running \/ no answer \(no answer within 500 ms/);
      assert.match(staleText.stdout, /consumer-0 pid \d+: WARN stale, heartbeat [\d.]+ s ago/);

      consumer.child.kill('SIGCONT');
      await waitFor(async () => (await status()).consumers[0].state === 'alive', { timeoutMs: 10_000, message: 'the heartbeat did not come back' });
    } finally {
      await Promise.all([stopApp(consumer), stopApp(relay), stopApp(producer)]);
    }
    // A clean stop leaves the entry, marked stopped; nothing deleted it.
    const stopped = (await status()).consumers;
    assert.deepEqual(stopped.map((c: any) => [c.consumerId, c.state]), [['consumer-0', 'stopped']]);
    const down = await status();
    assert.deepEqual(
      down.apps.map((a: any) => [a.app, a.state]),
      [
        ['outbox-producer', 'not running'],
        ['outbox-relay', 'not running'],
        ['outbox-consumer', 'not running'],
      ],
      'status answers while every app is down',
    );
  });
});

describe('the stats line', () => {
  it('relay and consumer each log one stats line per interval at info, with the interval counts; per-batch and per-duplicate lines only at debug', async () => {
    const every = { OUTBOX_STATS_EVERY: '1s' };
    // One duplicate: relay-crash pushes the row and dies before marking it, the relay pushes it again.
    o.place(29);
    await o.relay();
    o.place(1);
    assert.notEqual((await runCli(['relay-crash'], h.env)).code, 0);
    const relay = startApp(h.env, RELAY, [], every);
    const consumer = startApp(h.env, CONSUMER, [], { ...every, OUTBOX_HANDLER_THREADS: '1' });
    try {
      const sum = (app: App, msg: string, field: string) => linesOf(app, msg).reduce((total, line) => total + line[field], 0);
      await waitFor(() => sum(relay, 'relay stats', 'relayed') === 1, { timeoutMs: 15_000, message: 'relay stats never counted the re-pushed row' });
      await waitFor(() => sum(consumer, 'consumer stats', 'applied') === 30 && sum(consumer, 'consumer stats', 'duplicates') === 1, {
        timeoutMs: 15_000,
        message: `consumer stats did not count 30 applied and 1 duplicate: ${JSON.stringify(linesOf(consumer, 'consumer stats'))}`,
      });
      // The first relay run pushed 29 and relay-crash 1: the app relayed only the re-pushed one.
      o.place(7);
      await waitFor(() => sum(relay, 'relay stats', 'relayed') === 8, { timeoutMs: 15_000, message: 'relay stats did not count 7 more' });
      await waitFor(() => sum(consumer, 'consumer stats', 'applied') === 37, { timeoutMs: 15_000, message: 'consumer stats did not count 7 more' });
      const relayLine = linesOf(relay, 'relay stats').at(-1);
      assert.deepEqual(Object.keys(relayLine), ['level', 'time', 'app', 'msg', 'relayed', 'batches', 'passes', 'errors', 'lagMs']);
      assert.equal(relayLine.level, 'info');
      assert.equal(relayLine.errors, 0);
      const consumerLine = linesOf(consumer, 'consumer stats').at(-1);
      assert.deepEqual(Object.keys(consumerLine), ['level', 'time', 'app', 'msg', 'received', 'applied', 'duplicates', 'parked', 'dead', 'retried', 'errors', 'lagMs', 'queued']);
      assert.equal(consumerLine.queued, 0);
      assert.equal(linesOf(relay, 'batch relayed').length, 0, 'batch lines are debug');
      assert.equal(linesOf(consumer, 'duplicate skipped').length, 0, 'duplicate lines are debug');
    } finally {
      await Promise.all([stopApp(relay), stopApp(consumer)]);
    }
  });

  it('OUTBOX_LOG_LEVEL=debug adds the per-batch and per-duplicate lines', async () => {
    o.place(1);
    assert.notEqual((await runCli(['relay-crash'], h.env)).code, 0);
    const debug = { OUTBOX_LOG_LEVEL: 'debug' };
    const relay = startApp(h.env, RELAY, [], debug);
    const consumer = startApp(h.env, CONSUMER, [], { ...debug, OUTBOX_HANDLER_THREADS: '1' });
    try {
      await waitFor(() => linesOf(relay, 'batch relayed').length === 1 && linesOf(consumer, 'duplicate skipped').length === 1, {
        timeoutMs: 15_000,
        message: 'no debug lines',
      });
      assert.equal(linesOf(relay, 'batch relayed')[0].level, 'debug');
    } finally {
      await Promise.all([stopApp(relay), stopApp(consumer)]);
    }
  });
});
