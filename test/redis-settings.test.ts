import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Pm2, REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { readRefusals } from '../shared/runtime/refusals.js';
import { RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { useHarness } from './helpers/harness.js';
import { createLogger } from '../shared/outbox/logger.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { watchRedisMemory } from '../shared/outbox/redis/settings.js';
import { checkRedis } from '../shared/runtime/health/checks.js';
import { runCli } from './helpers/cli.js';
import { snapshotStores, tempDir } from './helpers/stores.js';

// The harness's server runs with `--save "" --appendonly no` (shared/tooling/local/redis-server.ts): nothing on disk.
const h = useHarness();

const EVICTS = 'may evict keys \\(maxmemory-policy allkeys-lru\\): outbox needs noeviction: run "redis-cli CONFIG SET maxmemory-policy noeviction" and set it in redis\\.conf';

/** Runs an app as a real process until it exits by itself. */
function runApp(script: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(REPO_ROOT, script)], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

describe('a Redis that may evict keys (allkeys-lru, CONFIG disabled) is refused', () => {
  let lru: RedisServer;
  before(async () => {
    // CONFIG renamed away: the policy must still be read (from INFO).
    lru = await RedisServer.start(['--maxmemory-policy', 'allkeys-lru', '--rename-command', 'CONFIG', '']);
  });
  after(() => lru.destroy());

  for (const command of ['relay', 'relay-crash', 'consume', 'lab']) {
    it(`outbox ${command} exits 5 with the one-line fix and changes nothing`, async () => {
      await h.cli('place-order', '--count', '2');
      const client = testClient(lru.url);
      await client.rpush('outbox.events', 'queued before');
      client.disconnect();
      const env = { dir: h.env.dir, redisUrl: lru.url };
      const before = await snapshotStores(env.dir, env.redisUrl);
      const result = await runCli([command], env);
      assert.equal(result.code, 5, result.stdout + result.stderr);
      assert.match(result.stderr, new RegExp(`^outbox: Redis at redis://127\\.0\\.0\\.1:${lru.port} ${EVICTS}\\n$`));
      assert.equal(await snapshotStores(env.dir, env.redisUrl), before);
    });
  }

  for (const [app, script] of [['outbox-relay', 'dist/apps/relay/main.js'], ['outbox-consumer', 'dist/apps/consumer/main.js']]) {
    it(`the ${app} app logs one JSON line and exits 78`, async () => {
      const { code, output } = await runApp(script, { OUTBOX_DIR: h.env.dir, REDIS_URL: lru.url });
      assert.equal(code, 78, output);
      const lines = output.trim().split('\n');
      assert.equal(lines.length, 1, output);
      const entry = JSON.parse(lines[0]);
      assert.deepEqual([entry.level, entry.app], ['error', app]);
      assert.match(entry.msg, new RegExp(`^Redis at redis://127\\.0\\.0\\.1:${lru.port} ${EVICTS}$`));
      assert.equal(entry.stack, undefined);
      // Recorded like any refused setting: outbox status says why the app is stopped.
      assert.deepEqual(readRefusals(h.env.dir).map(({ app: name, exitCode, message }) => [name, exitCode, message]), [[app, 78, entry.msg]]);
    });
  }

  it('under pm2 (ecosystem.config.cjs) the refused relay app is not restarted', async () => {
    const pm2 = new Pm2({ OUTBOX_DIR: h.env.dir, REDIS_URL: lru.url, OUTBOX_LOG_DIR: tempDir() });
    try {
      const started = await pm2.run('start', 'ecosystem.config.cjs', '--only', 'outbox-relay');
      assert.equal(started.code, 0, started.stderr);
      await waitFor(async () => (await pm2.process('outbox-relay')).pm2_env.exit_code === 78, { timeoutMs: 15_000 });
      // A restart would come restart_delay (200 ms) after the exit: watch for well over that.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      const relay = await pm2.process('outbox-relay');
      assert.deepEqual([relay.pid, relay.pm2_env.restart_time, relay.pm2_env.exit_code], [0, 0, 78]);
    } finally {
      await pm2.kill();
    }
  });

  it('outbox status still runs, shows the policy and warns; what CONFIG would tell is unknown', async () => {
    const env = { dir: h.env.dir, redisUrl: lru.url };
    const text = await runCli(['status'], env);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^redis +AOF off, RDB unknown, maxmemory-policy allkeys-lru$/m);
    assert.match(text.stdout, new RegExp(`^WARN +Redis ${EVICTS}$`, 'm'));
    assert.doesNotMatch(text.stdout, /keeps nothing on disk/);
    const json = JSON.parse((await runCli(['status', '--json'], env)).stdout);
    assert.deepEqual(json.redis, { maxmemoryPolicy: 'allkeys-lru', aofEnabled: false, appendfsync: null, save: null });
    assert.equal(json.warnings.length, 1);
  });
});

describe('outbox status shows how Redis keeps its data', () => {
  it('warns when Redis keeps nothing on disk', async () => {
    const text = await h.cli('status');
    assert.match(text.stdout, /^redis +AOF off, RDB off, maxmemory-policy noeviction$/m);
    assert.match(text.stdout, /^WARN +Redis keeps nothing on disk: a restart loses the queue and the consumer's state$/m);
    const json = JSON.parse((await h.cli('status', '--json')).stdout);
    assert.deepEqual(json.redis, { maxmemoryPolicy: 'noeviction', aofEnabled: false, appendfsync: 'everysec', save: '' });
    assert.deepEqual(json.warnings, ["Redis keeps nothing on disk: a restart loses the queue and the consumer's state"]);
  });

  it('warns when Redis answers writes before they are on disk (AOF with appendfsync everysec or no), and when it keeps only RDB snapshots', async () => {
    for (const [args, shown, warning] of [
      [['--appendonly', 'yes', '--appendfsync', 'everysec'], /^redis +AOF on \(appendfsync everysec\), RDB off, maxmemory-policy noeviction$/m, /^WARN +Redis answers writes before they are on disk \(appendfsync everysec\): a crash of the machine, or of Redis while its disk is slow, may lose the last ones it acknowledged \(about 2 s\), .*; set appendfsync always$/m],
      [['--appendonly', 'yes', '--appendfsync', 'no'], /^redis +AOF on \(appendfsync no\), RDB off, maxmemory-policy noeviction$/m, /^WARN +Redis leaves it to the OS when its writes reach the disk \(appendfsync no\): a crash of the machine may lose the last ones it acknowledged \(up to about 30 s\), .*; set appendfsync always$/m],
      [['--save', '3600 1'], /^redis +AOF off, RDB save points 3600 1, maxmemory-policy noeviction$/m, /^WARN +Redis keeps only RDB snapshots: a crash or kill of Redis loses what it acknowledged since the last one, .*; turn on appendonly with appendfsync always$/m],
    ] as const) {
      const server = await RedisServer.start([...args]);
      try {
        const text = await runCli(['status'], { dir: h.env.dir, redisUrl: server.url });
        assert.equal(text.code, 0, text.stderr);
        assert.match(text.stdout, shown);
        assert.match(text.stdout, warning);
        assert.equal(text.stdout.match(/^WARN/gm)?.length, 1, text.stdout);
      } finally {
        await server.destroy();
      }
    }
  });

  it('shows AOF with its fsync and the RDB save points, and no warning, when both are on', async () => {
    const persistent = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always', '--save', '3600 1 300 100']);
    try {
      const env = { dir: h.env.dir, redisUrl: persistent.url };
      const text = await runCli(['status'], env);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, /^redis +AOF on \(appendfsync always\), RDB save points 3600 1 300 100, maxmemory-policy noeviction$/m);
      assert.doesNotMatch(text.stdout, /^WARN/m);
      const json = JSON.parse((await runCli(['status', '--json'], env)).stdout);
      assert.deepEqual([json.redis.aofEnabled, json.warnings], [true, []]);
    } finally {
      await persistent.destroy();
    }
  });
});

describe('Redis memory settings changed while the apps run (issue 30)', () => {
  it('health fails for an evicting policy and for a full Redis, and passes once they are right again', async () => {
    const redis = await connectRedis(h.redis.url);
    try {
      assert.equal((await checkRedis(redis)).ok, true);
      await h.client.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const evicting = await checkRedis(redis);
      assert.equal(evicting.ok, false);
      assert.match(evicting.reason ?? '', new RegExp(`^Redis ${EVICTS}$`));
      await h.client.config('SET', 'maxmemory-policy', 'noeviction');
      await h.client.config('SET', 'maxmemory', '1mb');
      await h.client.set('filler', 'x'.repeat(2_000_000)).catch(() => {});
      const full = await checkRedis(redis);
      assert.equal(full.ok, false);
      assert.match(full.reason ?? '', /^Redis is full \(used_memory \d+ of maxmemory 1048576\): it refuses writes/);
      await h.client.config('SET', 'maxmemory', '0');
      assert.equal((await checkRedis(redis)).ok, true);
    } finally {
      await h.client.config('SET', 'maxmemory', '0');
      await h.client.config('SET', 'maxmemory-policy', 'noeviction');
      redis.disconnect();
    }
  });

  it('a running app says so in its log once per incident, and when it is right again', async () => {
    const lines: string[] = [];
    const stop = watchRedisMemory(h.client, createLogger('test', (line) => lines.push(line)), 20);
    try {
      await h.client.config('SET', 'maxmemory-policy', 'allkeys-lru');
      await waitFor(() => lines.some((line) => /"level":"error".*maxmemory-policy allkeys-lru/.test(line)), { message: lines.join('') });
      // Several more looks at the same incident: still one line.
      const after = lines.length;
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(lines.length, after, lines.join(''));
      await h.client.config('SET', 'maxmemory-policy', 'noeviction');
      await waitFor(() => lines.some((line) => /right again/.test(line)), { message: lines.join('') });
    } finally {
      stop();
      await h.client.config('SET', 'maxmemory-policy', 'noeviction');
    }
  });
});
