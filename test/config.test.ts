import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Pm2 } from '../shared/tooling/local/pm2.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { tempDir } from './helpers/stores.js';

const h = useHarness();

const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';
const PRODUCER = 'dist/apps/producer/main.js';
const REDIS = 'dist/apps/redis/main.js';

/** Something listening on a free port of 127.0.0.1, as a busy port 3000 would be. */
async function occupiedPort(): Promise<{ port: number; server: Server }> {
  const port = await freePort();
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { port, server };
}

/**
 * Runs `app` until it exits by itself and asserts the refusal: exit code 78, exactly one line of
 * output, JSON, level error, no stack, its message matching `pattern`; then that `outbox status`
 * names it. Resolves the message.
 */
async function assertRefused(script: string, appName: string, args: string[], env: Record<string, string>, pattern: RegExp): Promise<string> {
  const app = startApp(h.env, script, args, env);
  const { code } = await app.exited;
  const output = app.output();
  assert.equal(code, 78, output);
  const lines = output.split('\n').filter((line) => line !== '');
  assert.equal(lines.length, 1, output);
  const entry = JSON.parse(lines[0]) as Record<string, unknown>;
  assert.deepEqual([entry.level, entry.app, entry.exitCode], ['error', appName, 78]);
  assert.match(String(entry.msg), pattern);
  assert.equal(entry.stack, undefined);
  assert.doesNotMatch(output, /\n\s+at /, 'no stack trace');

  const refusal = join(h.env.dir, 'refused', `${appName}.json`);
  assert.equal(statSync(refusal).mode & 0o777, 0o600);
  assert.equal(statSync(join(h.env.dir, 'refused')).mode & 0o777, 0o700);
  const status = await runCli(['status'], h.env);
  assert.equal(status.code, 0, status.stderr);
  const line = status.stdout.split('\n').find((l) => l.includes(`${appName} refused to start`));
  assert.ok(line, status.stdout);
  assert.match(line, /^REFUSED +outbox-\w+ refused to start at \d{4}-\d\d-\d\dT[\d:.]+Z \(exit code 78\): /);
  assert.ok(line.endsWith(`: ${String(entry.msg)}`), line);
  const json = JSON.parse((await runCli(['status', '--json'], h.env)).stdout) as { refused: { app: string; exitCode: number; message: string }[] };
  assert.deepEqual(
    json.refused.filter(({ app }) => app === appName).map(({ app, exitCode, message }) => ({ app, exitCode, message })),
    [{ app: appName, exitCode: 78, message: entry.msg }],
  );
  return String(entry.msg);
}

describe('an app with a setting it cannot run with refuses to start: exit 78, one JSON line, the refusal in outbox status', () => {
  it('a duration without a unit (OUTBOX_RELAY_SLICE=1500)', async () => {
    await assertRefused(RELAY, 'outbox-relay', [], { OUTBOX_RELAY_SLICE: '1500' }, /^OUTBOX_RELAY_SLICE must be a duration like .*got "1500" without a unit/);
  });

  it('a duration that is not one (OUTBOX_RELAY_EVERY=NaN) and a count that is not one (OUTBOX_RELAY_BATCH_SIZE=NaN)', async () => {
    await assertRefused(RELAY, 'outbox-relay', [], { OUTBOX_RELAY_EVERY: 'NaN' }, /^OUTBOX_RELAY_EVERY must be a duration like .*got "NaN": write a number and a unit/);
    await assertRefused(RELAY, 'outbox-relay', [], { OUTBOX_RELAY_BATCH_SIZE: 'NaN' }, /^OUTBOX_RELAY_BATCH_SIZE must be a whole number from 1 to 100000, got "NaN"$/);
  });

  it('a negative duration, in the variable or in the flag (named as given)', async () => {
    await assertRefused(CONSUMER, 'outbox-consumer', [], { OUTBOX_HANDLER_TIMEOUT: '-1s' }, /^OUTBOX_HANDLER_TIMEOUT must be a duration like .*got "-1s", which is negative/);
    await assertRefused(RELAY, 'outbox-relay', ['--slice', '-1s'], {}, /^--slice must be a duration like .*got "-1s", which is negative/);
  });

  it('a duration out of its range (a relay lock of 10ms)', async () => {
    await assertRefused(RELAY, 'outbox-relay', [], { OUTBOX_RELAY_LOCK: '10ms' }, /^OUTBOX_RELAY_LOCK must be a duration from 100ms to 10m, got "10ms"$/);
  });

  it('a bad REDIS_URL is named as REDIS_URL, not --redis', async () => {
    const message = await assertRefused(CONSUMER, 'outbox-consumer', [], { REDIS_URL: 'foo' }, /^REDIS_URL must be a URL like redis:\/\/127\.0\.0\.1:6379, got "foo"$/);
    assert.doesNotMatch(message, /--redis/);
  });

  it('a retired *_MS variable still set is refused with its new name, not ignored', async () => {
    await assertRefused(
      RELAY,
      'outbox-relay',
      [],
      { OUTBOX_RELAY_SLICE_MS: '1500' },
      /^OUTBOX_RELAY_SLICE_MS is no longer read: set OUTBOX_RELAY_SLICE=1500ms instead \(durations take a unit\) and unset OUTBOX_RELAY_SLICE_MS$/,
    );
    await assertRefused(CONSUMER, 'outbox-consumer', [], { OUTBOX_HANDLER_TIMEOUT_MS: '300' }, /^OUTBOX_HANDLER_TIMEOUT_MS is no longer read: set OUTBOX_HANDLER_TIMEOUT=300ms/);
  });

  it('the producer on a busy port (EADDRINUSE), before it touches app.db', async () => {
    const { port, server } = await occupiedPort();
    try {
      await assertRefused(PRODUCER, 'outbox-producer', [], { PORT: String(port) }, new RegExp(`^cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use \\(EADDRINUSE\\): .*set PORT \\(--port\\)`));
      assert.equal(existsSync(join(h.env.dir, 'attached')), false, 'the refused producer registered itself on app.db');
    } finally {
      server.close();
    }
  });

  it('a traffic duration without a unit (OUTBOX_DURATION=60), an unknown flag', async () => {
    await assertRefused(PRODUCER, 'outbox-producer', [], { PORT: String(await freePort()), OUTBOX_DURATION: '60' }, /^OUTBOX_DURATION must be a duration .*got "60" without a unit/);
    await assertRefused(RELAY, 'outbox-relay', ['--evry', '1s'], {}, /^Unknown argument: evry/);
  });

  it('a log level that is not one (OUTBOX_LOG_LEVEL=verbose), in the apps run by runApp and in the managed Redis app', async () => {
    const level = /^OUTBOX_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, got "verbose"$/;
    await assertRefused(RELAY, 'outbox-relay', [], { OUTBOX_LOG_LEVEL: 'verbose' }, level);
    await assertRefused(REDIS, 'outbox-redis', [], { OUTBOX_LOG_LEVEL: 'verbose' }, level);
  });

  it('the managed Redis app with a bad OUTBOX_REDIS_PORT, and a fine start clears its refusal', async () => {
    await assertRefused(REDIS, 'outbox-redis', [], { OUTBOX_REDIS_PORT: '70000' }, /^OUTBOX_REDIS_PORT must be a port number from 1 to 65535, got "70000"$/);

    const app = startApp(h.env, REDIS, [], { OUTBOX_REDIS_PORT: String(await freePort()) });
    try {
      await waitFor(() => /"msg":"redis-server started"/.test(app.output()), { message: app.output() });
      assert.equal(existsSync(join(h.env.dir, 'refused', 'outbox-redis.json')), false, 'the refusal outlived a fine start');
      assert.doesNotMatch((await runCli(['status'], h.env)).stdout, /outbox-redis refused to start/);
    } finally {
      assert.equal((await stopApp(app)).code, 0, app.output());
    }
  });
});

describe('settings the producer does not use', () => {
  it('the producer starts with REDIS_URL=foo and a bad OUTBOX_NAMESPACE (it never talks to Redis), and a fine start clears its earlier refusal', async () => {
    const { port: busy, server } = await occupiedPort();
    const refused = startApp(h.env, PRODUCER, [], { PORT: String(busy) });
    assert.equal((await refused.exited).code, 78);
    server.close();
    assert.ok(existsSync(join(h.env.dir, 'refused', 'outbox-producer.json')));

    const port = await freePort();
    const app = startApp(h.env, PRODUCER, [], { PORT: String(port), REDIS_URL: 'foo', OUTBOX_NAMESPACE: 'not:valid' });
    try {
      await waitFor(() => /"msg":"producer listening"/.test(app.output()), { message: app.output() });
      const placed = await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"sku":"SKU-A","qty":1}' });
      assert.equal(placed.status, 201);
      assert.equal(existsSync(join(h.env.dir, 'refused', 'outbox-producer.json')), false, 'the refusal outlived a fine start');
      assert.doesNotMatch((await runCli(['status'], h.env)).stdout, /refused to start/);
    } finally {
      assert.equal((await stopApp(app)).code, 0, app.output());
    }
  });

  it('outbox relay and consume take the same checks on their flags', async () => {
    for (const [args, pattern] of [
      [['relay', '--batch-size', '0'], /^outbox: --batch-size must be a whole number from 1 to 100000, got "0"$/m],
      [['consume', '--max-attempts', 'many'], /^outbox: --max-attempts must be a whole number from 1 to 1000, got "many"$/m],
      [['consume', '--consumer-id', 'a:b'], /^outbox: --consumer-id must be 1-64 letters, digits, "\.", "_" or "-", got "a:b"$/m],
      [['status', '--redis', 'http://localhost'], /^outbox: --redis must start with redis:\/\/ or rediss:\/\//m],
    ] as const) {
      const result = await runCli([...args], h.env);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, pattern);
      assert.equal(result.stderr.split('\n').filter(Boolean).length, 1, result.stderr);
    }
    const fromEnv = await runCli(['status'], { ...h.env, redisUrl: 'foo' });
    assert.match(fromEnv.stderr, /^outbox: REDIS_URL must be a URL like redis:\/\/127\.0\.0\.1:6379, got "foo"$/m);
  });
});

describe('under pm2', () => {
  it('a bad setting leaves the apps stopped with exit code 78 and no restart, not online and crash-looping; outbox status says why', async () => {
    const { port, server } = await occupiedPort();
    const dir = h.env.dir;
    // REDIS_URL=foo stops the relay and the consumer; the busy port stops the producer.
    const pm2 = new Pm2({ OUTBOX_DIR: dir, REDIS_URL: 'foo', PORT: String(port), OUTBOX_LOG_DIR: tempDir() });
    const apps = ['outbox-producer', 'outbox-relay', 'outbox-consumer'];
    try {
      const started = await pm2.run('start', 'ecosystem.config.cjs');
      assert.equal(started.code, 0, started.stderr);
      await waitFor(async () => (await pm2.list()).filter((p) => apps.includes(p.name) && p.pm2_env.exit_code === 78).length === 3, {
        timeoutMs: 20_000,
        message: 'the apps did not all exit 78',
      });
      // A restart would follow at once (or after min_uptime): watch for well over that.
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const listed = (await pm2.list()).filter((p) => apps.includes(p.name)).sort((a, b) => a.name.localeCompare(b.name));
      assert.deepEqual(
        listed.map((p) => [p.name, p.pm2_env.status, p.pid, p.pm2_env.restart_time, p.pm2_env.exit_code]),
        [...apps].sort().map((name) => [name, 'stopped', 0, 0, 78]),
      );
      const status = await runCli(['status'], h.env);
      for (const app of apps) assert.match(status.stdout, new RegExp(`^REFUSED +${app} refused to start at `, 'm'));
      assert.match(status.stdout, /outbox-relay refused to start at .*: REDIS_URL must be a URL like/);
      // pm2 keeps the environment it started an app with: the line says how to get rid of it.
      assert.match(status.stdout, /outbox-relay refused to start at .*; once it is fixed: npx pm2 delete outbox-relay, then npx pm2 start ecosystem\.config\.cjs \(a restart keeps the old environment\)$/m);
      assert.match(status.stdout, /outbox-producer refused to start at .*: cannot listen on .*EADDRINUSE/);
    } finally {
      await pm2.kill();
      server.close();
    }
  });
});
