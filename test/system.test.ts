import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { runCli, type CliEnv } from './helpers/cli.js';
import { runLoad } from './helpers/http-load.js';
import { Pm2 } from '../shared/tooling/local/pm2.js';
import { freePort, RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { readDb, tempDir } from './helpers/stores.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { INVENTORY_KEY } from '../shared/lab/orders/order-keys.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

const APPS = ['outbox-producer', 'outbox-relay', 'outbox-consumer'];

let redis: RedisServer;
let client: Redis;
let pm2: Pm2;
let env: CliEnv;
let port: number;
let logDir: string;

/** Waits until the system has drained and `outbox verify` passes; resolves its output. */
async function verified(timeoutMs = 30_000): Promise<string> {
  let last = '';
  await waitFor(
    async () => {
      const result = await runCli(['verify'], env);
      last = result.stdout + result.stderr;
      return result.code === 0;
    },
    { timeoutMs, intervalMs: 250, message: `verify did not pass in time:\n${last}` },
  ).catch((error) => {
    throw new Error(`${(error as Error).message}\n${last}`);
  });
  return last;
}

const log = (app: string) => readFileSync(join(logDir, `${app}.log`), 'utf8');

async function restartedAfterKill(name: string): Promise<void> {
  const before = await pm2.process(name);
  process.kill(before.pid, 'SIGKILL');
  await waitFor(
    async () => {
      const now = await pm2.process(name);
      return now.pid !== before.pid && now.pid > 0 && now.pm2_env.status === 'online' && now.pm2_env.restart_time > before.pm2_env.restart_time;
    },
    { timeoutMs: 15_000, message: `pm2 did not restart ${name}` },
  );
}

before(async () => {
  // appendonly: stopping Redis for a few seconds must not lose what it held.
  redis = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'everysec']);
  client = testClient(redis.url);
  env = { dir: tempDir(), redisUrl: redis.url };
  port = await freePort();
  logDir = tempDir();
  // The apps never create app.db: `outbox init` first, as docs/getting-started.md says.
  const init = await runCli(['init'], env);
  assert.equal(init.code, 0, init.stderr);
  pm2 = new Pm2({
    OUTBOX_DIR: env.dir,
    REDIS_URL: redis.url,
    PORT: String(port),
    OUTBOX_LOG_DIR: logDir,
    // `batch relayed` is a debug line; this also proves the ecosystem passes the level on.
    OUTBOX_LOG_LEVEL: 'debug',
    // Some CPU per event, so that the two handler threads really overlap.
    OUTBOX_HANDLER_CPU: '0.2ms',
  });
  const started = await pm2.run('start', 'ecosystem.config.cjs');
  assert.equal(started.code, 0, started.stderr);
  await waitFor(async () => (await pm2.list()).filter((p) => APPS.includes(p.name) && p.pm2_env.status === 'online').length === 3, {
    message: 'the three apps did not come online',
  });
  // A timeout per try: a connection that is accepted but never answered would hold the wait for undici's
  // 300 s header timeout (seen once in a full run: the before hook took 303 s).
  await waitFor(() => fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok).catch(() => false), { message: 'producer not listening' });
});

after(async () => {
  await pm2?.kill();
  client?.disconnect();
  await redis?.destroy();
});

describe('the system under pm2', () => {
  it('runs the three apps from ecosystem.config.cjs without a managed Redis when REDIS_URL is set', async () => {
    assert.deepEqual((await pm2.list()).map((p) => p.name).sort(), [...APPS].sort());
  });

  it('applies every order placed over HTTP, in order, and verify passes', async () => {
    const load = await runLoad(port, { durationMs: 2_000 });
    assert.deepEqual(load.failures, []);
    assert.ok(load.accepted > 100, `only ${load.accepted} requests`);
    await verified();
    assert.equal(await client.hget('outbox:stats', 'parked'), null, 'an event arrived out of order');
    assert.match(log('outbox-relay'), /"msg":"batch relayed","count":\d+,"firstId":\d+,"lastId":\d+,"durationMs":/);
    assert.match(log('outbox-consumer'), /"msg":"consumer started"/);
  });

  it('loses nothing when the relay and the consumer are SIGKILLed mid-flow', async () => {
    const load = runLoad(port, { durationMs: 6_000 });
    await waitFor(async () => (await client.hlen('processed')) > 0);
    await restartedAfterKill('outbox-relay');
    await restartedAfterKill('outbox-consumer');
    const { failures } = await load;
    assert.deepEqual(failures, []);
    const report = await verified(45_000);
    assert.match(report, /VERIFY OK/);
    assert.equal(await client.hget('outbox:stats', 'parked'), null);
  });

  it('keeps accepting orders while Redis is down for 3 s, and loses nothing once it is back', async () => {
    const load = runLoad(port, { durationMs: 6_000 });
    await waitFor(async () => (await client.hlen('processed')) > 0);
    const processedBefore = await client.hlen('processed');
    await redis.stop();
    const stoppedAt = Date.now();
    await waitFor(() => Date.now() - stoppedAt >= 3_000, { intervalMs: 100 });
    await redis.resume();
    const { failures, accepted } = await load;
    assert.deepEqual(failures, [], 'the producer refused orders while Redis was down');
    assert.ok(accepted > 0);
    await verified(45_000);
    assert.ok((await client.hlen('processed')) > processedBefore);
    assert.match(log('outbox-relay'), /"msg":"redis connection lost, reconnecting"/);
    assert.match(log('outbox-relay'), /"msg":"redis reconnected"/);
  });

  it('rebuilds Redis from SQLite by itself after FLUSHALL: new orders are applied within 10 s, verify passes, the inventory is right', async () => {
    const load = runLoad(port, { durationMs: 4_000 });
    await waitFor(async () => (await client.hlen(keys.processed)) > 0);
    await client.flushall();
    const placed = await fetch(`http://127.0.0.1:${port}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sku: 'SKU-FLUSH', qty: 3 }),
    });
    assert.equal(placed.status, 201);
    const { eventId } = (await placed.json()) as { eventId: string };
    await waitFor(async () => (await client.hexists(keys.processed, eventId)) === 1, {
      timeoutMs: 10_000,
      intervalMs: 100,
      message: `the order placed after FLUSHALL (event ${eventId}) was not applied within 10 s`,
    });
    const { failures } = await load;
    assert.deepEqual(failures, []);
    const report = await verified(45_000);
    assert.match(report, /^SKUs whose reserved qty != live orders +0 +0 +ok$/m);
    const db = readDb(env.dir);
    const live = db.prepare("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku").all() as { sku: string; qty: number }[];
    db.close();
    const reserved = await client.hgetall(INVENTORY_KEY);
    assert.deepEqual(
      Object.fromEntries(Object.entries(reserved).filter(([, qty]) => qty !== '0')),
      Object.fromEntries(live.map(({ sku, qty }) => [sku, String(qty)])),
    );
    assert.match(log('outbox-relay'), /"msg":"Redis lost its state: rebuilding it from SQLite, \d+ published event\(s\) set back to PENDING/);
    assert.match(log('outbox-relay'), /"msg":"relay job scheduler was missing \(Redis lost its data\?\): re-created"/);
  });

  // What a stopping consumer hands back is proved in test/apps.test.ts, where one is kept waiting.
  it('stops gracefully on SIGINT (pm2 stop): it says so, and leaves no processing list behind', async () => {
    const stopped = await pm2.run('stop', 'outbox-consumer');
    assert.equal(stopped.code, 0);
    assert.match(log('outbox-consumer'), /"msg":"consumer stopped",.*"handedBack":\d+/);
    assert.match(log('outbox-consumer'), /"msg":"stopped","reason":"SIGINT"/);
    assert.deepEqual(await client.keys('outbox.events:processing:*').then((keys) => Promise.all(keys.map((k) => client.llen(k)))).then((l) => l.filter(Boolean)), []);
    await pm2.run('start', 'outbox-consumer');
    await waitFor(async () => (await pm2.process('outbox-consumer')).pm2_env.status === 'online');
  });

  it('outbox status shows the system on one screen, and as JSON', async () => {
    const text = await runCli(['status'], env);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^outbox +pending \d+/m);
    assert.match(text.stdout, /^relay +last job .* ago: \d+ events in \d+ batches/m);
    const json = await runCli(['status', '--json'], env);
    const status = JSON.parse(json.stdout);
    for (const key of ['pending', 'oldestPendingAgeMs', 'queued', 'processing', 'processed', 'parked', 'deadLettered', 'relayLastRun']) {
      assert.ok(key in status, key);
    }
    assert.ok(status.processed > 0);
  });
});
