import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createTcpServer, type Server } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { runCli, type CliResult } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { snapshotStores, tempDir } from './helpers/stores.js';

const h = useHarness();

/** The contract for an expected error: one line `outbox: …` on stderr, the exit code, no stack. */
function assertOneLine(result: CliResult, code: number, message: RegExp): void {
  assert.equal(result.code, code, result.stdout + result.stderr);
  assert.equal(result.stderr.trimEnd().split('\n').length, 1, result.stderr);
  assert.match(result.stderr, /^outbox: /);
  assert.match(result.stderr, message);
  assert.doesNotMatch(result.stderr, /\n\s+at /);
}

/** Lines of an app's output that are not one JSON object each. */
const notJson = (app: App) =>
  app
    .output()
    .split('\n')
    .filter((line) => line !== '')
    .filter((line) => {
      try {
        return typeof JSON.parse(line) !== 'object';
      } catch {
        return true;
      }
    });

async function listening(server: Server): Promise<string> {
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return `redis://127.0.0.1:${port}`;
}

describe('expected errors in the CLI: one line, a documented exit code', () => {
  it('init --dir naming a regular file is bad input (exit 2), and the file is left alone', async () => {
    const file = join(tempDir(), 'not-a-dir');
    writeFileSync(file, 'keep me');
    assertOneLine(await runCli(['init', '--dir', file], h.env), 2, /--dir .*not-a-dir is a file, not a directory/);
    assertOneLine(await runCli(['init', '--dir', join(file, 'sub')], h.env), 2, /is not a directory \(a parent of it is a file\)/);
    assert.equal(readFileSync(file, 'utf8'), 'keep me');
  });

  it('an app.db that is not outbox\'s (empty, or foreign with schema version 3) is refused by every command that opens it: exit 5', async () => {
    const commands = [
      ['place-order'], ['change-qty', '--id', '1', '--qty', '2'], ['cancel-order', '--id', '1'], ['relay'], ['relay-crash'],
      ['replay', '--from', '1'], ['report'], ['status'], ['verify'], ['prune', '--older-than', '1d'],
    ];
    for (const [what, make] of [
      ['empty file', (db: Database.Database) => db.exec('VACUUM')],
      ['foreign, version 3', (db: Database.Database) => db.exec('CREATE TABLE things (id INTEGER PRIMARY KEY); PRAGMA user_version = 3')],
    ] as const) {
      const env = { ...h.env, dir: tempDir() };
      const path = join(env.dir, 'app.db');
      const db = new Database(path);
      make(db);
      db.close();
      const before = await snapshotStores(env.dir, env.redisUrl);
      for (const args of commands) {
        const result = await runCli(args, env);
        assertOneLine(result, 5, new RegExp(`${path} is not an outbox database .*outbox init`));
        assert.equal(await snapshotStores(env.dir, env.redisUrl), before, `${what}: outbox ${args.join(' ')} changed a store`);
      }
    }
  });

  it('--redis pointed at a server that is not Redis (plain TCP, HTTP) says so: exit 5', async () => {
    const tcp = createTcpServer((socket) => socket.on('data', () => socket.write('hello\n')));
    const http = createHttpServer((_req, res) => res.end('hi'));
    try {
      for (const url of [await listening(tcp), await listening(http as unknown as Server)]) {
        const result = await runCli(['status'], { ...h.env, redisUrl: url });
        assertOneLine(result, 5, new RegExp(`the server at ${url} does not speak the Redis protocol`));
        assert.doesNotMatch(result.stderr, /RESP|report this|start redis-server/);
      }
    } finally {
      tcp.close();
      http.close();
    }
  });

  it('prune --older-than with a negative value, or with none, is bad input about the value (exit 2)', async () => {
    for (const args of [['--older-than', '-1d'], ['--older-than=-1d']]) {
      assertOneLine(await runCli(['prune', ...args], h.env), 2, /--older-than must be a duration like .*got "-1d"/);
    }
    assertOneLine(await runCli(['prune', '--older-than'], h.env), 2, /Not enough arguments following: older-than/);
  });

  it('relay against an app.db whose write lock another process holds longer than 5 s: one line, exit 5', async () => {
    await h.cli('place-order');
    const holder = new Database(join(h.env.dir, 'app.db'));
    holder.exec('BEGIN IMMEDIATE');
    try {
      assertOneLine(await runCli(['relay'], h.env), 5, /app\.db is locked by another writer \(SQLITE_BUSY\): try again/);
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
  });
});

describe('expected errors in the apps: JSON lines only', () => {
  const RELAY = 'dist/apps/relay/main.js';
  const CONSUMER = 'dist/apps/consumer/main.js';
  const PRODUCER = 'dist/apps/producer/main.js';

  it('relay, consumer and producer write nothing but JSON lines through a Redis restart and a bad request', async () => {
    const port = await freePort();
    const apps = [startApp(h.env, RELAY), startApp(h.env, CONSUMER), startApp(h.env, PRODUCER, [], { PORT: String(port) })];
    try {
      await waitFor(() => /"msg":"relay started"/.test(apps[0].output()) && /"msg":"consumer started"/.test(apps[1].output()));
      await waitFor(() => /"msg":"producer listening"/.test(apps[2].output()));
      const base = `http://127.0.0.1:${port}`;
      const bad = await fetch(`${base}/orders/%ZZ`);
      assert.equal(bad.status, 400);
      await fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"sku":"SKU-A","qty":1}' });
      await h.redis.stop('SIGKILL');
      // Long enough for every connection (the apps' own, BullMQ's) to fail several reconnects.
      await waitFor(() => apps.slice(0, 2).every((app) => /"msg":"redis connection lost, reconnecting"/.test(app.output())));
      await new Promise((resolve) => setTimeout(resolve, 3000));
      await h.redis.resume();
      await waitFor(() => apps.slice(0, 2).every((app) => /"msg":"redis reconnected"/.test(app.output())), { timeoutMs: 15_000 });
      await fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"sku":"SKU-A","qty":1}' });
      await waitFor(async () => (await h.client.hlen('processed')) >= 1, { timeoutMs: 15_000 });
    } finally {
      await Promise.all(apps.map((app) => stopApp(app)));
    }
    for (const app of apps) assert.deepEqual(notJson(app).slice(0, 5), [], app.output().slice(-3000));
  });

  it('a queue key of the wrong type is named once by the relay and by the consumer, not every second', async () => {
    await h.client.set('outbox.events', 'not a list');
    await h.cli('place-order');
    const relay = startApp(h.env, RELAY, ['--every', '200ms', '--slice', '200ms']);
    const consumer = startApp(h.env, CONSUMER);
    const named = /Redis (key|one of the keys) [^"]*outbox\.events[^"]* holds another type than outbox keeps there/g;
    try {
      await waitFor(() => (relay.output().match(named)?.length ?? 0) >= 1 && (consumer.output().match(named)?.length ?? 0) >= 1);
      // Several failed relay passes and takes later, still the one line each.
      await new Promise((resolve) => setTimeout(resolve, 2500));
    } finally {
      await Promise.all([stopApp(relay), stopApp(consumer)]);
    }
    for (const app of [relay, consumer]) {
      assert.equal(app.output().match(named)?.length, 1, app.output());
      assert.deepEqual(notJson(app), []);
    }
  });
});
