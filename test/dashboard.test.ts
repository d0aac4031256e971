import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import type { Browser, Page } from 'puppeteer-core';
import { createDatabase } from '../shared/lab/init-stores.js';
import { sleep } from '../shared/outbox/sleep.js';
import { Pm2, REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { freePort, RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { closeChromium, launchChromium } from './helpers/browser.js';
import { runCli } from './helpers/cli.js';
import { runLoad } from './helpers/http-load.js';
import { count, storeIdIn, tempDir } from './helpers/stores.js';
import { guardOf } from './helpers/guards.js';

// Issue 13, part 2: the dashboard page, run by pm2 from ecosystem.config.cjs and driven in a real
// headless Chromium.
const APPS = ['outbox-producer', 'outbox-relay', 'outbox-consumer', 'outbox-dashboard'];

let redis: RedisServer;
let client: Redis;
let pm2: Pm2;
let browser: Browser;
/** The browser being launched: closed in `after` even when `before` failed before it was awaited. */
let launching: Promise<Browser> | undefined;
let page: Page;
let dir: string;
let storeId: string;
let failFile: string;
let producerPort: number;
let dashboardPort: number;
let origin: string;
let token: string;
/** Screenshots of each step, kept after the run (the path is printed). */
const shots = mkdtempSync(join(tmpdir(), 'outbox-dashboard-shots-'));

const text = (selector: string) => page.$eval(selector, (el) => el.textContent ?? '');
const number = async (selector: string) => Number((await text(selector)).replace(/,/g, ''));

async function pipeline() {
  return { committed: await number('#committed'), applied: await number('#applied'), pending: await number('#pending') };
}

async function appRows() {
  return page.$$eval('#apps tbody tr', (rows) =>
    rows.map((row) => {
      const field = (name: string) => row.querySelector(`[data-field=${name}]`)?.textContent ?? '';
      return { app: (row as HTMLElement).dataset.app, status: field('status'), restarts: field('restarts'), health: field('health') };
    }),
  );
}

/** The rows of a held table: their id (first cell) and reason. */
async function heldRows(table: string) {
  return page.$$eval(`#${table} tbody tr[data-key]`, (rows) => rows.map((row) => ({ id: row.cells[0].textContent, reason: row.cells[2].textContent })));
}

async function post(port: number, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

/** GET /api/state with the Host header `host`: the status. */
function statusWithHost(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: dashboardPort, path: '/api/state', headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    })
      .on('error', reject)
      .end();
  });
}

async function setToken(value: string): Promise<void> {
  await page.$eval('#token', (el, v) => {
    (el as HTMLInputElement).value = v;
    el.dispatchEvent(new Event('input'));
  }, value);
}

async function screenshot(name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

before(async () => {
  // First: without Chromium the file fails here, in one line, before anything starts. The browser
  // starts while pm2 starts the apps.
  launching = launchChromium();
  launching.catch(() => {});
  redis = await RedisServer.start();
  client = testClient(redis.url);
  dir = tempDir();
  createDatabase(dir);
  storeId = storeIdIn(dir);
  // Order 1's first event fails at its one attempt (OUTBOX_MAX_ATTEMPTS 1): dead-lettered at once,
  // and its second event is parked behind it. Switched off by deleting the file.
  failFile = join(dir, 'handler-fail');
  writeFileSync(failFile, 'throw:1@1:1');
  [producerPort, dashboardPort] = [await freePort(), await freePort()];
  origin = `http://127.0.0.1:${dashboardPort}`;
  pm2 = new Pm2({
    OUTBOX_DIR: dir,
    REDIS_URL: redis.url,
    PORT: String(producerPort),
    OUTBOX_DASHBOARD_PORT: String(dashboardPort),
    OUTBOX_RELAY_HEALTH_PORT: String(await freePort()),
    OUTBOX_CONSUMER_HEALTH_PORT: String(await freePort()),
    OUTBOX_LOG_DIR: tempDir(),
    OUTBOX_HANDLER_FAIL_FILE: failFile,
    OUTBOX_MAX_ATTEMPTS: '1',
    OUTBOX_HANDLER_THREADS: '1',
  });
  const started = await pm2.run('start', 'ecosystem.config.cjs');
  assert.equal(started.code, 0, started.stderr);
  await waitFor(async () => (await pm2.list()).filter((p) => APPS.includes(p.name) && p.pm2_env.status === 'online').length === APPS.length, {
    timeoutMs: 40_000,
    message: 'the four apps did not come online',
  });
  await waitFor(() => fetch(`${origin}/api/state`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok).catch(() => false), { message: 'the dashboard does not answer' });
  token = readFileSync(join(dir, 'dashboard-token'), 'utf8').trim();
  browser = await launching;
  page = await browser.newPage();
});

after(async () => {
  // A Chromium left running would keep this file's process alive, and the whole run with it.
  await closeChromium(browser ?? (await launching?.catch(() => undefined)));
  await pm2?.kill();
  client?.disconnect();
  await redis?.destroy();
});

describe('the dashboard page in a real Chromium', () => {
  it('loads everything from the dashboard itself (uPlot included), shows the store, and the four pm2 apps online, 0 restarts, healthy; refuses another Host name', async (t) => {
    t.diagnostic(`screenshots in ${shots}`);
    const requested: string[] = [];
    page.on('request', (request) => void requested.push(request.url()));
    const response = await page.goto(`${origin}/#token=${token}`, { waitUntil: 'load' });
    assert.equal(response?.status(), 200);
    assert.match(response!.headers()['content-security-policy'], /default-src 'self'/);
    assert.equal(page.url(), `${origin}/`, 'the token is taken out of the address bar');

    await waitFor(async () => (await text('#store')) === `store ${storeId} · no namespace · Redis serves it`, { message: 'the store line is not shown' });
    await waitFor(
      async () => {
        const rows = await appRows();
        return APPS.every((app) => rows.some((r) => r.app === app && r.status === 'online' && r.restarts === '0' && /^ok/.test(r.health)));
      },
      { message: 'the apps table does not show the four apps online and healthy' },
    );
    assert.ok(await page.$('#lag-chart canvas'), 'the lag chart is drawn');
    assert.equal(await page.$eval('#partitions-section', (el) => (el as HTMLElement).hidden), true, 'no partitions table with one partition');
    assert.ok(requested.includes(`${origin}/vendor/uPlot.iife.min.js`), 'uPlot is served by the dashboard');
    assert.deepEqual(requested.filter((url) => !url.startsWith(`${origin}/`)), [], 'nothing is loaded from elsewhere');
    assert.equal(statSync(join(dir, 'dashboard-token')).mode & 0o777, 0o600);
    // DNS rebinding: a page served under another name that resolves to 127.0.0.1 reads nothing.
    assert.equal(await statusWithHost(`rebound.example:${dashboardPort}`), 421);
    assert.equal(await statusWithHost(`localhost:${dashboardPort}`), 200);
    await screenshot('1-loaded');
  });

  it('moves its numbers as orders flow, agrees with Redis and app.db once drained, and lists the dead letter and the event parked behind it', async () => {
    // Order 1 (the first): placed, then its quantity changed: seq 1 dead-lettered, seq 2 parked.
    const placed = (await (await post(producerPort, '/orders', { sku: 'SKU-A', qty: 2 })).json()) as { orderId: number };
    assert.equal(placed.orderId, 1);
    assert.equal((await post(producerPort, '/orders/1/qty', { qty: 3 })).status, 200);

    const load = runLoad(producerPort, { durationMs: 2_500, workers: 4 });
    // Two steps up, each seen on the page: committed and applied both grow.
    const seen = [await pipeline()];
    for (let step = 0; step < 2; step += 1) {
      const last = seen.at(-1)!;
      const moved = async () => ((now) => (now.committed > last.committed && now.applied > last.applied ? now : undefined))(await pipeline());
      seen.push((await waitFor(moved, { message: `the numbers stopped moving: ${JSON.stringify(seen)}` }))!);
    }
    await waitFor(async () => /^\d[\d.,]*\/s$/.test(await text('#rate-applied')) && (await text('#rate-applied')) !== '0.0/s', { message: 'no applied rate shown' });
    await waitFor(async () => (await heldRows('dead-letters')).length === 1 && (await heldRows('parked')).length === 1, { message: 'the dead letter and the parked event are not listed' });
    const [dead] = await heldRows('dead-letters');
    assert.equal(dead.id, '0');
    assert.match(dead.reason ?? '', /injected failure \(OUTBOX_HANDLER_FAIL\)/);
    assert.equal((await heldRows('parked'))[0].id, 'order:1:2');
    await screenshot('2-flowing');
    if (process.env.OUTBOX_DOCS_SCREENSHOT === '1') {
      mkdirSync(join(REPO_ROOT, 'docs'), { recursive: true });
      await page.screenshot({ path: join(REPO_ROOT, 'docs', 'dashboard.png'), fullPage: true });
    }
    const { failures } = await load;
    assert.deepEqual(failures, []);

    // Drained: what the page shows is what app.db and Redis hold.
    await waitFor(
      async () => {
        const shown = await pipeline();
        return shown.pending === 0 && shown.committed === count(dir, 'SELECT MAX(id) FROM outbox') && shown.applied === Number(await client.hget('outbox:stats', 'applied'));
      },
      { message: 'the drained numbers do not agree with app.db and Redis' },
    );
  });

  it('refuses a missing or wrong token (401, nothing changes); with the token, the dead letter retried from the page is applied and releases the parked one', async () => {
    const held = async () => ({ dead: await client.lrangeBuffer('outbox.events:dead', 0, -1), parked: await client.hgetall('outbox.events:parked'), queued: await client.llen('outbox.events') });
    const before = await held();
    assert.equal(before.dead.length, 1);

    await setToken('not-the-token');
    await page.click('#dead-letters tbody tr[data-key] button.retry');
    await waitFor(async () => (await text('#action-result')).startsWith('dead-letter 0: refused (401): missing or wrong token'), { message: 'the page did not show the refusal' });
    const key = await page.$eval('#dead-letters tbody tr[data-key]', (row) => (row as HTMLElement).dataset.key!);
    for (const path of ['/api/dead-letter/retry', '/api/dead-letter/drop', '/api/parked/retry', '/api/parked/drop']) {
      const tries: Record<string, string>[] = [{}, { authorization: 'Bearer not-the-token' }, { authorization: `Bearer ${token}x` }, { authorization: token }];
      for (const headers of tries) {
        const response = await post(dashboardPort, path, { key: path.includes('parked') ? 'order:1:2' : key }, headers);
        assert.equal(response.status, 401, `${path} ${JSON.stringify(headers)}`);
      }
    }
    assert.deepEqual(await held(), before, 'a refused action changed nothing');

    // The handler is fixed. The consumer re-reads the file at most every 100 ms, and nothing shows
    // when it did: the one wait that is not on a condition.
    rmSync(failFile);
    await sleep(150);
    await setToken(token);
    await page.click('#dead-letters tbody tr[data-key] button.retry');
    await waitFor(async () => (await text('#action-result')) === 'dead-letter 0: put back on the queue', { message: 'the retry was not done' });
    await waitFor(async () => (await guardOf(client, 'order:1')) === '2', { message: 'order 1 was not applied after the retry' });
    await waitFor(async () => (await text('#dead-letters tbody')) === 'no dead letters' && (await text('#parked tbody')) === 'nothing parked', { message: 'the tables still list them' });
    assert.equal(await number('#dead-count'), 0);
    await screenshot('3-retried');
    const verify = await runCli(['verify'], { dir, redisUrl: redis.url });
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /VERIFY OK/);
  });

  it('without app.db and Redis it still serves the page, saying why its numbers are missing', async () => {
    const env = { dir: tempDir(), redisUrl: 'redis://127.0.0.1:1' };
    const port = await freePort();
    const app = startApp(env, 'dist/apps/dashboard/main.js', [], { OUTBOX_DASHBOARD_PORT: String(port), PORT: String(await freePort()), PM2_HOME: join(env.dir, 'pm2') });
    try {
      const state = await waitFor(() => fetch(`http://127.0.0.1:${port}/api/state`, { signal: AbortSignal.timeout(2000) }).then((r) => (r.ok ? r.json() : undefined)).catch(() => undefined), { message: app.output() });
      assert.equal(state.problems.length, 2, state.problems.join('\n'));
      assert.ok(state.problems[0].startsWith(`no database at ${env.dir}/app.db: run "outbox init" first`), state.problems[0]);
      assert.equal(state.problems[1], 'Redis is not connected: its numbers are missing');
      assert.equal(state.store, null);
      assert.equal(state.pm2.running, false);
      assert.equal((await fetch(`http://127.0.0.1:${port}/`)).status, 200);
    } finally {
      assert.equal((await stopApp(app)).code, 0, app.output());
    }
  });

  it('refuses a bad setting and a taken port before it listens: one JSON line, exit 78', async () => {
    const env = { dir: tempDir(), redisUrl: 'redis://127.0.0.1:1' };
    const refusals: [App, string][] = [];
    for (const [extra, message] of [
      [{ OUTBOX_DASHBOARD_PORT: '70000' }, 'OUTBOX_DASHBOARD_PORT must be a whole number from 0 to 65535, got "70000"'],
      [{ OUTBOX_DASHBOARD_HOST: ' ' }, 'OUTBOX_DASHBOARD_HOST must be an address to bind, got " "'],
      [{ OUTBOX_DASHBOARD_PORT: String(dashboardPort) }, `cannot listen on 127.0.0.1:${dashboardPort}: the port is in use (EADDRINUSE): stop what listens there, or set OUTBOX_DASHBOARD_PORT (--port) or OUTBOX_DASHBOARD_HOST (--host) to another one`],
    ] as const) {
      refusals.push([startApp(env, 'dist/apps/dashboard/main.js', [], extra), message]);
    }
    for (const [app, message] of refusals) {
      const exit = await app.exited;
      assert.equal(exit.code, 78, app.output());
      const lines = app.output().trim().split('\n');
      assert.equal(lines.length, 1, app.output());
      assert.equal(JSON.parse(lines[0]).msg, message);
    }
  });
});
