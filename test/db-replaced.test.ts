import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp as startAppIn, stopApp, type App } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { count, snapshotStores } from './helpers/stores.js';

// Issue #8: `rm app.db*; outbox init` (or init --force, or lab) while the apps run.
const h = useHarness();

const startApp = (script: string, args: string[], env: Record<string, string> = {}) => startAppIn(h.env, script, args, env);

/** Stops the app and resolves its exit code. */
const stop = async (app: App): Promise<number | null> => (await stopApp(app)).code;

async function startProducer(): Promise<{ app: App; call: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }> }> {
  const port = await freePort();
  const app = startApp('dist/apps/producer/main.js', [], { PORT: String(port) });
  await waitFor(() => /"msg":"producer listening"/.test(app.output()) || app.child.exitCode !== null);
  assert.match(app.output(), /"msg":"producer listening"/);
  const call = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
    });
    return { status: response.status, body: await response.json() };
  };
  return { app, call };
}

const removeDatabase = () => {
  for (const suffix of ['', '-wal', '-shm']) rmSync(join(h.env.dir, `app.db${suffix}`), { force: true });
};
const lines = (app: App, pattern: RegExp) => app.output().split('\n').filter((line) => pattern.test(line));

describe('app.db deleted or replaced under the producer app', () => {
  it('deleted (rm app.db*): the next write is a 503, never a 201, healthz says why; after outbox init writes land in the new file', async () => {
    const { app, call } = await startProducer();
    try {
      assert.equal((await call('POST', '/orders', { sku: 'SKU-A', qty: 1 })).status, 201);
      removeDatabase();
      const lost = await call('POST', '/orders', { sku: 'SKU-A', qty: 2 });
      assert.equal(lost.status, 503);
      assert.match(lost.body.error, /app\.db was deleted or replaced under the producer: refusing writes/);
      assert.equal((await call('POST', '/orders/1/qty', { qty: 3 })).status, 503, 'every later write is refused');
      const health = await call('GET', '/healthz');
      assert.equal(health.status, 503);
      assert.equal(health.body.ok, false);
      assert.match(health.body.reason, /deleted or replaced.*run "outbox init"/);
      assert.equal(existsSync(join(h.env.dir, 'app.db')), false, 'the producer does not create app.db');

      await h.cli('init');
      await waitFor(async () => (await call('GET', '/healthz')).status === 200, { message: 'the producer did not resume' });
      const placed = await call('POST', '/orders', { sku: 'SKU-B', qty: 4 });
      assert.equal(placed.status, 201);
      assert.equal(placed.body.orderId, 1);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE event_id = ?", placed.body.eventId), 1);
      assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 1);
      assert.equal(lines(app, /deleted or replaced under the producer/).length, 1, 'logged once');
      assert.equal(lines(app, /a valid app.db is back: the producer resumes on it/).length, 1);
    } finally {
      assert.equal(await stop(app), 0);
    }
  });

  it('replaced (rm app.db*; outbox init): no 201 for a write that is not in the live app.db; then it resumes on the new file', async () => {
    const { app, call } = await startProducer();
    try {
      for (let i = 0; i < 5; i += 1) assert.equal((await call('POST', '/orders', { sku: 'SKU-A', qty: 1 })).status, 201);
      removeDatabase();
      // Writes go on while `outbox init` creates the new file; the old file is still open in the producer.
      const init = runCli(['init'], h.env);
      const accepted: string[] = [];
      const refused: string[] = [];
      while (accepted.length < 20) {
        const { status, body } = await call('POST', '/orders', { sku: 'SKU-B', qty: 1 });
        if (status === 201) accepted.push(body.eventId);
        else if (status === 503) refused.push(body.error);
        else assert.fail(`unexpected ${status} ${JSON.stringify(body)}`);
        if (accepted.length === 0 && refused.length > 2000) assert.fail('the producer did not resume');
      }
      assert.equal((await init).code, 0);
      assert.ok(refused.length > 0);
      assert.match(refused[0], /deleted or replaced under the producer: refusing writes.*went to the old file and is lost/);
      const live = accepted.filter((eventId) => count(h.env.dir, 'SELECT COUNT(*) FROM outbox WHERE event_id = ?', eventId) === 1);
      assert.deepEqual(live, accepted, 'every write answered 201 is in the live app.db');
      assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), accepted.length, 'and nothing else is');
      assert.equal(lines(app, /deleted or replaced under the producer/).length, 1, 'logged once');
    } finally {
      assert.equal(await stop(app), 0);
    }
  });
});

describe('the producer\'s traffic generator', () => {
  it('pauses quietly while app.db is deleted (the loss logged once) and goes on in the new one after outbox init', async () => {
    const port = await freePort();
    const app = startApp('dist/apps/producer/main.js', [], { PORT: String(port), OUTBOX_RATE: '200' });
    try {
      await waitFor(() => count(h.env.dir, 'SELECT COUNT(*) FROM orders') > 20, { message: 'no traffic' });
      removeDatabase();
      await waitFor(() => lines(app, /app\.db was deleted or replaced under the producer/).length === 1);
      await h.cli('init');
      await waitFor(() => lines(app, /a valid app.db is back: the producer resumes on it/).length === 1);
      await waitFor(() => count(h.env.dir, 'SELECT COUNT(*) FROM orders') > 20, { message: 'the traffic did not go on in the new app.db' });
      assert.equal(lines(app, /traffic operation failed/).length, 0, app.output());
    } finally {
      assert.equal(await stop(app), 0);
    }
  });
});

describe('app.db deleted or replaced under the relay app', () => {
  it('stops relaying from the old file, logs it once; a new store with the old Redis is refused, and after init --force it relays from the new file', async () => {
    const relay = startApp('dist/apps/relay/main.js', ['--every', '300ms', '--slice', '300ms']);
    try {
      await h.cli('place-order');
      await waitFor(async () => (await h.client.llen('outbox.events')) === 1);
      removeDatabase();
      await waitFor(() => lines(relay, /app\.db was deleted or replaced under the relay: not relaying/).length === 1);
      await h.cli('init');
      await h.cli('place-order', '--count', '2');
      // The new app.db is another store: the old Redis state does not belong to it.
      await waitFor(() => lines(relay, /serves store/).length === 1, { message: 'the relay did not refuse the old Redis' });
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 2);
      await h.cli('init', '--force', '--ignore-attached');
      await h.cli('place-order', '--count', '2');
      await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { message: 'the relay did not resume' });
      assert.equal(await h.client.llen('outbox.events'), 2);
      assert.equal(lines(relay, /deleted or replaced under the relay/).length, 2);
      assert.equal(lines(relay, /a valid app.db is back: the relay resumes on it/).length, 2);
    } finally {
      assert.equal(await stop(relay), 0);
    }
  });
});

describe('the apps never create app.db', () => {
  it('with no app.db the producer answers 503 and the relay waits, both saying to run outbox init; after init they work', async () => {
    // A fresh machine: no app.db and an empty Redis.
    removeDatabase();
    await h.client.flushall();
    const { app: producer, call } = await startProducer();
    const relay = startApp('dist/apps/relay/main.js', ['--every', '300ms', '--slice', '300ms']);
    try {
      await waitFor(() => /"msg":"relay started"/.test(relay.output()));
      for (const app of [producer, relay]) {
        assert.equal(lines(app, /no database at .*app\.db: run \\"outbox init\\" first/).length, 1, app.output());
      }
      const refused = await call('POST', '/orders', { sku: 'SKU-A', qty: 1 });
      assert.equal(refused.status, 503);
      assert.match(refused.body.error, /no database at .*: run "outbox init" first/);
      assert.equal((await call('GET', '/healthz')).status, 503);
      assert.equal(existsSync(join(h.env.dir, 'app.db')), false);
      assert.equal(producer.child.exitCode, null, 'no crash loop');

      await h.cli('init');
      await waitFor(async () => (await call('POST', '/orders', { sku: 'SKU-A', qty: 1 })).status === 201, { message: 'the producer did not start working' });
      await waitFor(async () => (await h.client.llen('outbox.events')) === 1, { message: `the relay did not relay:\n${relay.output()}` });
      // Pushed first, marked right after: wait for the mark.
      await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { message: 'the relay did not mark the row' });
    } finally {
      assert.equal(await stop(producer), 0);
      assert.equal(await stop(relay), 0);
    }
  });
});

describe('init --force and lab while apps are attached', () => {
  it('refuse while the producer app runs (exit 4, both stores unchanged), go ahead with --ignore-attached', async () => {
    const { app, call } = await startProducer();
    try {
      for (let i = 0; i < 3; i += 1) assert.equal((await call('POST', '/orders', { sku: 'SKU-A', qty: 1 })).status, 201);
      await h.cli('relay');
      assert.equal(statSync(join(h.env.dir, 'attached')).mode & 0o777, 0o700);
      const before = await snapshotStores(h.env.dir, h.env.redisUrl);
      for (const args of [['init', '--force'], ['lab']]) {
        const result = await runCli(args, h.env);
        assert.equal(result.code, 4, `${args.join(' ')}: ${result.stdout}${result.stderr}`);
        assert.equal(
          result.stderr,
          `outbox: outbox-producer (pid ${app.child.pid}) has ${join(h.env.dir, 'app.db')} open: stop them first: npx pm2 stop ecosystem.config.cjs, or pass --ignore-attached\n`,
        );
        assert.equal(await snapshotStores(h.env.dir, h.env.redisUrl), before);
      }
      assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 3);

      await h.cli('init', '--force', '--ignore-attached');
      assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 0);
      assert.equal(await h.client.llen('outbox.events'), 0);
      await waitFor(async () => (await call('POST', '/orders', { sku: 'SKU-A', qty: 1 })).status === 201, { message: 'the producer did not switch to the new app.db' });
      assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 1);
    } finally {
      assert.equal(await stop(app), 0);
    }
    assert.deepEqual(readdirSync(join(h.env.dir, 'attached')), [], 'a stopped app removes its registration');
  });

  it('a registration left by a dead process is ignored and removed', async () => {
    const dead = spawn(process.execPath, ['-e', '']);
    await new Promise((resolve) => dead.on('exit', resolve));
    const stale = join(h.env.dir, 'attached', `outbox-relay.${dead.pid}.json`);
    mkdirSync(join(h.env.dir, 'attached'), { recursive: true });
    writeFileSync(stale, JSON.stringify({ app: 'outbox-relay', pid: dead.pid, startedAt: new Date().toISOString() }));
    await h.cli('place-order');
    await h.cli('init', '--force');
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.equal(existsSync(stale), false);
  });
});
