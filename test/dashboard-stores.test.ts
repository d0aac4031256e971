import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { createDatabase } from '../shared/lab/init-stores.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { createPgOrderService } from '../shared/lab/orders/pg-order-service.js';
import { pgStoreIdOf } from '../shared/outbox/postgres/pg-store-meta.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../shared/outbox/redis/connect-partitions.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { partitionOf, type Partitions } from '../shared/outbox/redis/partitions.js';
import { sleep } from '../shared/outbox/sleep.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import type { DashboardState } from '../shared/runtime/dashboard/sampler.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, stopApps, type App } from './helpers/apps.js';
import { closeChromium, launchChromium } from './helpers/browser.js';
import { runCli, type CliEnv } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { usePostgres } from './helpers/postgres.js';
import { startRedisCluster } from './helpers/redis-cluster.js';
import { count } from './helpers/stores.js';
import { guardOf } from './helpers/guards.js';

// Issue 12: the dashboard app (its HTTP API: the page draws what /api/state answers) across
// partitions on one Redis, and on the PostgreSQL store.
const h = useHarness({ init: false });
const pgDb = usePostgres();
const PARTITIONS = 3;
let parts: Partitions | undefined;
after(() => parts && closePartitions(parts));

/** The dashboard app on `env`, on a free port, with no pm2 daemon to ask. */
async function startDashboard(env: CliEnv, extra: Record<string, string> = {}): Promise<{ app: App; port: number; state: Dashboard['state'] }> {
  const port = await freePort();
  const app = startApp(env, 'dist/apps/dashboard/main.js', [], { OUTBOX_DASHBOARD_PORT: String(port), PORT: String(await freePort()), PM2_HOME: join(env.dir, 'pm2'), ...extra });
  const state = () =>
    fetch(`http://127.0.0.1:${port}/api/state`, { signal: AbortSignal.timeout(5000) })
      .then((r) => (r.ok ? (r.json() as Promise<DashboardState>) : undefined))
      .catch(() => undefined);
  return { app, port, state };
}

interface Dashboard {
  app: App;
  state: () => Promise<DashboardState | undefined>;
}

/** The first state that `holds`, else the last one (and the app's output) in the failure. */
async function stateWhere({ app, state }: Dashboard, holds: (s: DashboardState) => boolean, what: string): Promise<DashboardState> {
  let last: DashboardState | undefined;
  try {
    return (await waitFor(async () => ((last = await state()) && holds(last) ? last : undefined), { timeoutMs: 30_000, intervalMs: 100 }))!;
  } catch {
    throw new Error(`${what}: ${JSON.stringify(last && { problems: last.problems, pipeline: last.pipeline, partitions: last.partitions, store: last.store })}\n${app.output().slice(-3000)}`);
  }
}

const post = (port: number, path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

describe('the dashboard across partitions', () => {
  it('3 partitions on one Redis, the relay and consumer apps: the numbers are the sums of the partitions, a row each; a dead letter of partition 2 retried through the API is applied', async () => {
    createDatabase(h.env.dir);
    const target = { redisUrl: h.redis.url, partitions: PARTITIONS };
    parts = await connectTargetPartitions(target, (options) => connectTarget(target, options));
    const db = openDatabase(h.env.dir);
    const service = createOrderService(db);
    // Orders 1..9; the first one in partition 2 fails at its first event, its one attempt: dead-lettered, its second event parked behind it.
    const ids = Array.from({ length: 9 }, () => service.placeOrder({ sku: 'SKU-A', qty: 1 }).order.id);
    const failing = ids.find((id) => partitionOf(`order:${id}`, PARTITIONS) === 2)!;
    assert.ok(failing !== undefined && new Set(ids.map((id) => partitionOf(`order:${id}`, PARTITIONS))).size === PARTITIONS, 'the orders spread over every partition');
    const failFile = join(h.env.dir, 'handler-fail');
    writeFileSync(failFile, `throw:1@${failing}:1`);
    for (const id of ids) service.changeQty(id, 2);
    db.close();
    const env = { OUTBOX_PARTITIONS: String(PARTITIONS), OUTBOX_PARTITION_LEASE: '1s', OUTBOX_HANDLER_THREADS: '1', OUTBOX_RELAY_EVERY: '200ms', OUTBOX_MAX_ATTEMPTS: '1' };
    const apps = [
      startApp(h.env, 'dist/apps/relay/main.js', [], env),
      startApp(h.env, 'dist/apps/consumer/main.js', [], { ...env, OUTBOX_CONSUMER_ID: 'one', OUTBOX_HANDLER_FAIL_FILE: failFile }),
    ];
    const dashboard = await startDashboard(h.env, env);
    apps.push(dashboard.app);
    try {
      const total = 2 * ids.length;
      const s = await stateWhere(
        dashboard,
        (s) => s.pipeline.pending === 0 && s.pipeline.queued === 0 && s.pipeline.inFlight === 0 && s.pipeline.applied === total - 2 && s.parked.length === 1 && s.deadLetters.length === 1,
        'the dashboard does not show the drained partitions',
      );
      const applied = await Promise.all(parts.clients.map(async (redis) => Number(await redis.hget(keys.stats, 'applied'))));
      assert.equal(s.pipeline.applied, applied[0] + applied[1] + applied[2]);
      assert.equal(s.pipeline.committed, count(h.env.dir, 'SELECT MAX(id) FROM outbox'));
      assert.equal(s.pipeline.enqueued, total);
      assert.deepEqual({ parked: s.pipeline.parked, deadLettered: s.pipeline.deadLettered }, { parked: 1, deadLettered: 1 });
      assert.deepEqual(
        s.partitions?.map((p) => ({ ...p, leaseHolder: p.leaseHolder?.split('#')[0] })),
        applied.map((n, index) => ({ index, queued: 0, inFlight: 0, applied: n, parked: index === 2 ? 1 : 0, deadLettered: index === 2 ? 1 : 0, leaseHolder: 'one' })),
      );
      assert.equal(s.store?.redis, 'serves');
      assert.deepEqual(s.consumers.map((c) => [c.consumerId, c.state]), [['one', 'alive']], 'one heartbeat per consumer, merged over its partitions');
      assert.deepEqual(s.problems, []);
      const [dead] = s.deadLetters;
      assert.equal(dead.id, '2:0');
      assert.match(dead.key, /^2:[0-9a-f]{32}$/);
      assert.equal(s.parked[0].id, `order:${failing}:2`);

      // Without the token nothing moves; with it, the retry goes to partition 2 and releases the parked event.
      assert.equal((await post(dashboard.port, '/api/dead-letter/retry', { key: dead.key })).status, 401);
      assert.equal(await parts.clients[2].llen(keys.deadLetter), 1);
      rmSync(failFile);
      // The consumer re-reads the file at most every 100 ms, and nothing shows when it did.
      await sleep(150);
      const token = readFileSync(join(h.env.dir, 'dashboard-token'), 'utf8').trim();
      assert.equal((await post(dashboard.port, '/api/dead-letter/retry', { key: `0:${dead.key.slice(2)}` }, { authorization: `Bearer ${token}` })).status, 404, 'the key names its partition');
      const retried = await post(dashboard.port, '/api/dead-letter/retry', { key: dead.key }, { authorization: `Bearer ${token}` });
      assert.equal(retried.status, 200, await retried.clone().text());
      await waitFor(async () => (await guardOf(parts!.clients[2], `order:${failing}`)) === '2', { message: 'the retried dead letter was not applied' });
      await stateWhere(dashboard, (s) => s.pipeline.applied === total && s.deadLetters.length === 0 && s.parked.length === 0 && s.partitions?.[2].deadLettered === 0, 'the retry is not shown');
      const verify = await runCli(['verify'], { ...h.env, env: { OUTBOX_PARTITIONS: String(PARTITIONS) } });
      assert.equal(verify.code, 0, verify.stdout + verify.stderr);

      // A dashboard configured for one partition says so rather than show empty queues.
      const single = await startDashboard(h.env);
      apps.push(single.app);
      const wrong = await stateWhere(single, (s) => s.problems.some((p) => p.includes('partitions')), 'no problem shown');
      assert.match(wrong.problems.join('\n'), /holds 3 partitions, not 1: set --partitions \/ OUTBOX_PARTITIONS to 3/);
    } finally {
      await stopApps(apps);
    }
  });
});

describe('the dashboard on a Redis Cluster', () => {
  it("3 partitions on a 3-master cluster: each partition's queue on its row, their sum above, the store served", async () => {
    const cluster = await startRedisCluster();
    const target = { redisUrl: 'redis://127.0.0.1:1', redisCluster: cluster.nodes.join(','), partitions: PARTITIONS };
    const env = { dir: h.env.dir, redisUrl: target.redisUrl };
    const settings = { OUTBOX_PARTITIONS: String(PARTITIONS), OUTBOX_REDIS_CLUSTER: target.redisCluster };
    const clusterParts = await connectTargetPartitions(target, (options) => connectTarget(target, options));
    let dashboard: Awaited<ReturnType<typeof startDashboard>> | undefined;
    try {
      createDatabase(env.dir);
      const db = openDatabase(env.dir);
      const service = createOrderService(db);
      for (let i = 0; i < 12; i += 1) service.placeOrder({ sku: 'SKU-A', qty: 1 });
      db.close();
      const relayed = await runCli(['relay'], { ...env, env: settings });
      assert.equal(relayed.code, 0, relayed.stdout + relayed.stderr);
      const queued = await Promise.all(clusterParts.clients.map((redis) => redis.llen(keys.events)));
      assert.equal(queued.reduce((a, b) => a + b, 0), 12);
      dashboard = await startDashboard(env, settings);
      const s = await stateWhere(dashboard, (s) => s.pipeline.queued === 12, 'the queued events are not shown');
      assert.deepEqual(s.partitions?.map((p) => p.queued), queued);
      assert.deepEqual(s.partitions?.map((p) => p.leaseHolder), [null, null, null]);
      assert.deepEqual([s.pipeline.pending, s.pipeline.committed, s.store?.redis], [0, 12, 'serves']);
      assert.deepEqual(s.problems, []);
      // The page draws that table (with one partition it hides it: see dashboard.test.ts).
      const browser = await launchChromium();
      try {
        const page = await browser.newPage();
        await page.goto(`http://127.0.0.1:${dashboard.port}/`, { waitUntil: 'load' });
        const rows = () =>
          page.$$eval('#partitions tbody tr', (trs) => trs.map((tr) => [tr.cells[0].textContent, tr.querySelector('[data-field=queued]')?.textContent, tr.querySelector('[data-field=lease]')?.textContent]));
        await waitFor(async () => (await rows()).length === PARTITIONS, { message: 'the partitions table is not drawn' });
        assert.deepEqual(await rows(), queued.map((n, i) => [String(i), String(n), 'none']));
        assert.equal(await page.$eval('#partitions-section', (el) => (el as HTMLElement).hidden), false);
      } finally {
        await closeChromium(browser);
      }
    } finally {
      if (dashboard) assert.equal((await stopApp(dashboard.app)).code, 0, dashboard.app.output());
      await closePartitions(clusterParts);
      await cluster.stop();
    }
  });
});

describe('the dashboard on PostgreSQL', () => {
  it("shows the PostgreSQL store's pending, oldest pending and committed, its id and whether Redis serves it; a database without the outbox tables, or no PostgreSQL, is a problem line", async () => {
    await pgDb.reset();
    await pgDb.scalar('DROP TABLE IF EXISTS orders');
    const pgEnv = { OUTBOX_DATABASE_URL: pgDb.url };
    const dashboard = await startDashboard(h.env, pgEnv);
    const apps = [dashboard.app];
    try {
      const empty = await stateWhere(dashboard, (s) => s.problems.some((p) => p.startsWith('cannot read the PostgreSQL store: ')), 'no problem line for the missing tables');
      assert.match(empty.problems.join('\n'), /relation "outbox" does not exist/);
      assert.equal(empty.pipeline.pending, undefined);

      const init = await runCli(['init'], { ...h.env, env: pgEnv });
      assert.equal(init.code, 0, init.stdout + init.stderr);
      const service = await createPgOrderService(pgDb.pool(2));
      for (let i = 0; i < 3; i += 1) await service.placeOrder({ sku: 'SKU-A', qty: 1 });
      const storeId = await pgStoreIdOf(pgDb.pool(1));
      const committed = Number(await pgDb.scalar('SELECT MAX(id) FROM outbox'));
      const unrelayed = await stateWhere(dashboard, (s) => s.pipeline.pending === 3, 'the pending rows are not shown');
      assert.deepEqual(unrelayed.problems, []);
      assert.equal(unrelayed.pipeline.committed, committed);
      assert.ok(typeof unrelayed.pipeline.oldestPendingAgeMs === 'number' && unrelayed.pipeline.oldestPendingAgeMs >= 0);
      assert.deepEqual([unrelayed.store?.source, unrelayed.store?.id, unrelayed.store?.redis], ['PostgreSQL', storeId, 'unclaimed']);

      apps.push(startApp(h.env, 'dist/apps/relay/main.js', [], { ...pgEnv, OUTBOX_RELAY_POLL: '50ms' }));
      const relayed = await stateWhere(dashboard, (s) => s.pipeline.pending === 0 && s.pipeline.queued === 3 && s.store?.redis === 'serves', 'the relayed rows are not shown');
      assert.equal(relayed.pipeline.committed, committed);
      assert.equal(relayed.pipeline.oldestPendingAgeMs, null);

      // No PostgreSQL there: the Redis numbers are shown, the store's are missing with the reason.
      const down = await startDashboard(h.env, { OUTBOX_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/outbox' });
      apps.push(down.app);
      const unreachable = await stateWhere(down, (s) => s.pipeline.queued === 3, 'the dashboard without PostgreSQL does not show Redis');
      assert.equal(unreachable.problems.length, 2, unreachable.problems.join('\n'));
      assert.match(unreachable.problems[0], /^cannot read the PostgreSQL store: .*ECONNREFUSED/);
      assert.match(unreachable.problems[1], /^cannot read the PostgreSQL store's id: .*ECONNREFUSED/);
      assert.deepEqual([unreachable.pipeline.pending, unreachable.store], [undefined, null]);
    } finally {
      await stopApps(apps);
    }
  });
});
