import assert from 'node:assert/strict';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { RELAY_QUEUE } from '../shared/outbox/relay/relay-worker.js';
import { defineScripts, moveToProcessing } from '../shared/outbox/redis/scripts.js';
import { startApp, stopApp } from './helpers/apps.js';
import { runCli, startCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { count, snapshotStores, storeIdIn } from './helpers/stores.js';
import { dropAllGuards, dropGuard, guardOf, guardsOf, setGuard } from './helpers/guards.js';

const h = useHarness();
const o = orders(() => h.env);

/** Orders with several events each, so that a rebuild has to apply them in seq order again: 7 events, relayed and applied. */
async function applyLifecycle(): Promise<void> {
  o.place(4, { sku: 'SKU-A', qty: 2 });
  o.changeQty(1, 5);
  o.changeQty(1, 3);
  o.cancel(2);
  await o.relay();
  await o.consume();
}

/**
 * An applied seq lost after a prune, one event parked behind it: verify counts no pruned effect as
 * lost and names the aggregates behind (`behind`); --repair raises `raised` of them and queues the
 * parked event, which then applies; nothing is counted unrecoverable, and the stores verify.
 */
async function repairsPrunedPrefixAsApplied(behind: RegExp, raised: number): Promise<void> {
  const broken = await runCli(['verify', '--settle', '0s'], h.env);
  assert.equal(broken.code, 1);
  assert.match(broken.stdout, /^pruned events Redis lost \(effects cannot be rebuilt\) +0 +0 +ok$/m);
  assert.match(broken.stdout, behind);
  const repaired = await h.cli('verify', '--repair', '--yes', '--settle', '0s');
  assert.match(repaired.stdout, new RegExp(`^repair: ${raised} aggregate\\(s\\) given back the applied seq their processed entries show; 1 parked event\\(s\\) queued again$`, 'm'));
  assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 0,/);
  assert.equal(await h.client.hget('outbox:meta', 'unrecoverable'), null, 'no effect counted as lost');
  await o.verify('0s');
  assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
}

/** SUM(qty) of the live orders per SKU, as the reserved inventory must be. */
function liveReserved(): Record<string, string> {
  const db = new Database(join(h.env.dir, 'app.db'), { readonly: true });
  try {
    const rows = db.prepare("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku").all() as { sku: string; qty: number }[];
    return Object.fromEntries(rows.map((r) => [r.sku, String(r.qty)]));
  } finally {
    db.close();
  }
}

describe('store identity', () => {
  it('a recreated app.db with the old Redis is refused with both store ids, never silently skipped', async () => {
    await applyLifecycle();
    const oldStore = h.storeId;

    for (const suffix of ['', '-wal', '-shm']) rmSync(join(h.env.dir, `app.db${suffix}`), { force: true });
    await h.cli('init');
    const newStore = storeIdIn(h.env.dir);
    assert.notEqual(newStore, oldStore);
    o.place(3);

    const before = await snapshotStores(h.env.dir, h.env.redisUrl);
    for (const command of ['relay', 'verify', 'report', 'prune']) {
      const args = command === 'prune' ? [command, '--older-than', '0s'] : [command];
      const refused = await runCli(args, h.env);
      assert.equal(refused.code, 5, `${command}: ${refused.stderr}`);
      assert.equal(refused.stderr.trim().split('\n').length, 1);
      assert.match(refused.stderr, new RegExp(`is store ${newStore}, but Redis at [^ ]+ serves store ${oldStore} .*a namespace of its own`));
      // Never the advice that would delete another deployment's keys (issue 30).
      assert.doesNotMatch(refused.stderr, /init --force/);
    }
    assert.equal(await snapshotStores(h.env.dir, h.env.redisUrl), before, 'a refused command changed a store');

    // status shows the mismatch instead of refusing.
    const status = await h.cli('status');
    assert.match(status.stdout, new RegExp(`store +${newStore}: WARN Redis serves another store, ${oldStore}`));

    // init --force starts both over: the new store is claimed by the first relay and applied in full.
    await h.cli('init', '--force');
    o.place(3);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 3, duplicates skipped 0/);
    await o.verify();
  });

  it('an app.db restored from an older backup of itself: the relay pushes nothing that would reuse applied seqs, verify names it, --repair rebuilds Redis from it', async () => {
    const file = join(h.env.dir, 'app.db');
    o.place(3, { sku: 'SKU-A', qty: 1 });
    await o.relay();
    await o.consume();
    const backup = join(h.env.dir, 'backup.db');
    const live = new Database(file);
    await live.backup(backup);
    live.close();
    // Events the backup does not hold, applied: order 1's seq 2 (row 4) and order 4's seq 1 (row 5).
    o.changeQty(1, 5);
    o.place(1, { sku: 'SKU-A', qty: 2 });
    await o.relay();
    await o.consume();

    for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
    copyFileSync(backup, file);
    // Before anything new: app.db no longer holds row 5, and never issued an id that high.
    const restored = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(restored.code, 1);
    assert.match(restored.stdout, /the store is not behind Redis +yes +no +FAIL/);
    assert.match(restored.stdout, /Redis was pushed outbox row 5 as event \S+, and \S+app\.db no longer holds it/);

    // The new events take the lost ones' ids and seqs (order 1's seq 2, order 4's seq 1): pushed, they would be skipped as duplicates.
    o.changeQty(1, 7);
    o.place(1, { sku: 'SKU-A', qty: 4 });
    const before = await snapshotStores(h.env.dir, h.env.redisUrl);
    const refused = await runCli(['relay'], h.env);
    assert.equal(refused.code, 5, refused.stderr);
    assert.equal(refused.stderr.trim().split('\n').length, 1);
    assert.match(refused.stderr, /app\.db is behind Redis at \S+: Redis was pushed outbox row 5 as event \S+, and \S+ now holds \S+ there .*outbox verify --repair/);
    assert.equal(await snapshotStores(h.env.dir, h.env.redisUrl), before, 'the refused relay changed a store');
    // Nor does prune delete a row (a dry run included): the repair rebuilds Redis from the store's rows.
    for (const args of [['--dry-run'], []]) {
      const pruned = await runCli(['prune', '--older-than', '0s', ...args], h.env);
      assert.equal(pruned.code, 5, pruned.stdout + pruned.stderr);
      assert.equal(pruned.stderr.trim().split('\n').length, 1);
      assert.match(pruned.stderr, /app\.db is behind Redis at \S+: Redis was pushed outbox row 5/);
    }
    assert.equal(await snapshotStores(h.env.dir, h.env.redisUrl), before, 'the refused prune changed a store');
    // status shows it (it refuses nothing: it is where an operator looks first).
    const status = await h.cli('status');
    assert.match(status.stdout, /^store +\S+: WARN the store is behind Redis: Redis was pushed outbox row 5 as event \S+, and app\.db now holds \S+ there .*outbox verify --repair/m);
    const json = JSON.parse((await h.cli('status', '--json')).stdout) as { store: { redis: string; behind: { rowId: number } } };
    assert.equal(json.store.redis, 'behind');
    assert.equal(json.store.behind.rowId, 5);
    // So does the dashboard (its /api/state, which the page draws).
    const port = await freePort();
    const dashboard = startApp(h.env, 'dist/apps/dashboard/main.js', [], { OUTBOX_DASHBOARD_PORT: String(port), PM2_HOME: join(h.env.dir, 'pm2') });
    try {
      const state = await waitFor(async () => {
        const body = await fetch(`http://127.0.0.1:${port}/api/state`, { signal: AbortSignal.timeout(5000) }).then((r) => (r.ok ? (r.json() as Promise<{ store: { redis: string } | null }>) : undefined)).catch(() => undefined);
        return body?.store ? body : undefined;
      }, { timeoutMs: 20_000, message: 'the dashboard never answered /api/state with a store state' });
      assert.equal(state?.store?.redis, 'behind', dashboard.output());
    } finally {
      await stopApp(dashboard);
    }

    const repaired = await h.cli('verify', '--repair', '--yes', '--settle', '0s');
    assert.match(repaired.stdout, /^repair: deleted \d+ Redis key\(s\) of this project$/m);
    assert.match(repaired.stdout, /^repair: Redis lost its state: rebuilding it from SQLite, 3 published event\(s\) set back to PENDING to be applied again$/m);
    assert.match(repaired.stdout, /^repair: relayed 5 event\(s\)/m);
    assert.match((await h.cli('consume')).stdout, /applied 5, duplicates skipped 0, parked 0/);
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
    assert.match((await h.cli('status')).stdout, /^store +\S+: Redis serves it;/m);
  });

  it('--repair of an app.db behind Redis says first that the effects of the events pruned before its backup go too', async () => {
    const file = join(h.env.dir, 'app.db');
    o.place(3, { sku: 'SKU-A', qty: 1 });
    await o.relay();
    await o.consume();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 3 PUBLISHED row/m);
    const backup = join(h.env.dir, 'backup.db');
    const live = new Database(file);
    await live.backup(backup);
    live.close();
    o.place(2, { sku: 'SKU-A', qty: 2 });
    await o.relay();
    await o.consume();
    for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
    copyFileSync(backup, file);
    const plan = await runCli(['verify', '--repair', '--dry-run', '--settle', '0s'], h.env);
    assert.match(plan.stdout, /delete this project's keys in Redis, whose state follows events SQLite no longer holds .*; the effects of 3 event\(s\) of 3 aggregate\(s\) pruned from SQLite go with them and cannot be rebuilt \(verify names them\)/);
    assert.equal(await h.client.exists('outbox:meta'), 1, 'a dry run deletes nothing');
  });

  it('an app.db that lost its store id is refused in one line (exit 5) and claims no Redis', async () => {
    o.place(1);
    const db = new Database(join(h.env.dir, 'app.db'));
    db.prepare("DELETE FROM outbox_meta WHERE key = 'store_id'").run();
    db.close();
    const before = (await h.client.keys('*')).sort();
    for (const command of ['relay', 'verify', 'status']) {
      const result = await runCli([command], h.env);
      assert.equal(result.code, 5, `${command}: ${result.stderr}`);
      assert.match(result.stderr, /^outbox: .+app\.db has no store id \(its outbox_meta table lost the store_id row\): restore app\.db from a backup, or start over with "outbox init --force"\n$/);
    }
    assert.deepEqual((await h.client.keys('*')).sort(), before);
    assert.equal(await h.client.llen('outbox.events'), 0);
  });

  it('the consumer dead-letters a message of another store, and one that reaches a Redis serving no store', async () => {
    const message = (storeId: string, id: number) =>
      JSON.stringify({ event_id: `evt-${id}`, aggregate_id: `order:${id}`, seq: 1, event_type: 'OrderPlaced', payload: { orderId: id, sku: 'SKU-X', qty: 1 }, store_id: storeId });
    await h.client.rpush('outbox.events', message('0123456789abcdef', 1), message(h.storeId, 2));
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 0, dead-lettered 1/);
    assert.deepEqual(await h.client.hkeys('processed'), ['evt-2']);
    const [dead] = (await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry));
    assert.equal(dead.reason, `from store 0123456789abcdef, but this Redis serves store ${h.storeId}`);

    await h.client.del('outbox:meta');
    await h.client.rpush('outbox.events', message(h.storeId, 3));
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 0, dead-lettered 1/);
    assert.match(JSON.parse((await h.client.lindex('outbox.events:dead', 1))!).reason, /serves no store \(it lost its state/);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-X'), '1');
  });
});

describe('Redis that lost its state', () => {
  it('the relay notices (no outbox:meta), rebuilds every effect from SQLite, and verify is OK again', async () => {
    await applyLifecycle();
    await o.verify();

    await h.client.flushall();
    const broken = await runCli(['verify'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /Redis serves this store +yes +no: Redis lost its state +FAIL/);
    assert.match((await h.cli('status')).stdout, /WARN Redis lost its state \(no outbox:meta\)/);

    // Orders keep coming meanwhile: the next relay pass rebuilds, then relays everything in id order.
    o.changeQty(3, 9);
    o.place(1, { sku: 'SKU-B', qty: 4 });
    const relayed = await h.cli('relay');
    assert.match(relayed.stdout, /^Redis lost its state: rebuilding it from SQLite, 7 published event\(s\) set back to PENDING to be applied again$/m);
    assert.match(relayed.stdout, /relayed 9 events/);
    assert.match((await h.cli('consume')).stdout, /applied 9, duplicates skipped 0, parked 0/);
    assert.match((await h.cli('order-check')).stdout, /ORDER OK/);
    const verify = await h.cli('verify');
    assert.match(verify.stdout, /VERIFY OK/);
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
    assert.match((await h.cli('status')).stdout, /Redis serves it; rebuilt from SQLite 1 time\(s\)/);
  });

  it('a partial loss (the meta hash gone, some consumer state left) is rebuilt from scratch: no effect doubled, none skipped', async () => {
    await applyLifecycle();
    // The consumer recorded the key its effects wrote: the rebuild deletes what that set names.
    assert.deepEqual(await h.client.smembers('outbox:effect-keys'), ['inventory:reserved']);
    // The inventory and processed survive while the applied seqs and dedupe markers go ...
    const markers = await h.client.keys('outbox:seen:*');
    await h.client.del('outbox:meta', ...markers);
    await dropAllGuards(h.client);
    await o.relay();
    await o.consume();
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
    // ... or the dedupe markers survive while the effects go.
    await h.client.del('outbox:meta', 'processed', 'inventory:reserved');
    await dropAllGuards(h.client);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 7, duplicates skipped 0, parked 0/);
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
  });

  it("the applied seqs lost alone (the meta hash and processed kept): the aggregates' next events park; verify names each, --repair raises it to what processed shows applied and they apply, none twice", async () => {
    await applyLifecycle();
    await dropAllGuards(h.client);
    // Orders keep coming: order 1's seq 4 and order 3's seq 2 wait for seqs Redis applied already; a new order applies.
    o.changeQty(1, 6);
    o.changeQty(3, 4);
    o.place(1, { sku: 'SKU-B', qty: 1 });
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 2,/);
    const broken = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /^aggregates whose applied seq != last seq +0 +4 +FAIL\n +e\.g\. order:1: applied seq 0 in Redis, its events applied through seq 3 \(their processed entries\): its next events wait, parked, for seqs applied already; outbox verify --repair raises it, order:2: applied seq 0 in Redis, its events applied through seq 2/m);
    assert.match(broken.stdout, /^parked events \(waiting for a gap\) +0 +2 +FAIL$/m);
    // Nothing is lost: republishing would not help, the parked events wait for seqs already applied.
    assert.match(broken.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    const plan = await runCli(['verify', '--repair', '--dry-run', '--settle', '0s'], h.env);
    assert.match(plan.stdout, /^verify --repair would raise the applied seq of 4 aggregate\(s\) that Redis lost/m);
    assert.match(plan.stdout, /^ +order:1 applied seq 0 -> 3$/m);
    assert.deepEqual(await guardsOf(h.client), { 'order:5': '1' }, 'the dry run changed nothing');
    const repaired = await h.cli('verify', '--repair', '--yes', '--settle', '0s');
    assert.match(repaired.stdout, /^repair: 4 aggregate\(s\) given back the applied seq their processed entries show; 2 parked event\(s\) queued again$/m);
    assert.match((await h.cli('consume')).stdout, /applied 2, duplicates skipped 0, parked 0,/);
    assert.deepEqual(await guardsOf(h.client), { 'order:1': '4', 'order:2': '2', 'order:3': '2', 'order:4': '1', 'order:5': '1' });
    await o.verify('0s');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
  });

  it("an applied seq lost after a prune, with an event after the pruned ones applied and kept: the pruned events count as applied, not as lost effects, and --repair raises the seq past them", async () => {
    await applyLifecycle();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 7 PUBLISHED row/m);
    o.changeQty(1, 6);
    await o.relay();
    await o.consume();
    // Order 1's seqs 1-3 are pruned, its seq 4 applied and kept; then its applied seq goes, and seq 5 parks.
    await dropGuard(h.client, 'order:1');
    o.changeQty(1, 7);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 1,/);
    await repairsPrunedPrefixAsApplied(/^aggregates whose applied seq != last seq +0 +1 +FAIL\n +e\.g\. order:1: applied seq 0 in Redis, its events applied through seq 4 /m, 1);
    assert.equal(await guardOf(h.client, 'order:1'), '5');
  });

  it('the applied seqs lost after a prune of every event of the aggregates: the last pruned event\'s processed entry shows them applied, so they count as applied, not as lost effects, and --repair raises each seq to the pruned one', async () => {
    await applyLifecycle();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 7 PUBLISHED row/m);
    await dropAllGuards(h.client);
    // Order 1's seqs 1-3 are all pruned; its seq 4 parks, waiting for seq 1.
    o.changeQty(1, 6);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 1,/);
    await repairsPrunedPrefixAsApplied(/^aggregates whose applied seq != last seq +0 +4 +FAIL\n +e\.g\. order:1: applied seq 0 in Redis, its events applied through seq 3 /m, 4);
    assert.deepEqual(await guardsOf(h.client), { 'order:1': '4', 'order:2': '2', 'order:3': '1', 'order:4': '1' });
  });

  it('the applied seqs lost alone, then the applied events replayed: each duplicate whose processed entry shows it applied puts the seq guard back and releases the event parked behind it', async () => {
    await applyLifecycle();
    await dropAllGuards(h.client);
    o.changeQty(1, 6);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 1,/);
    assert.match((await h.cli('replay', '--from', '1', '--to', '7')).stdout, /^7 row\(s\) set back to PENDING/m);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 7, parked 0,/);
    assert.equal(await guardOf(h.client, 'order:1'), '4');
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    await o.verify('0s');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
  });

  it('a parked event whose aggregate\'s applied seq was put back without releasing it (by hand, as database mode\'s claim did before it released them too) is named, and --repair queues it again', async () => {
    await applyLifecycle();
    await dropGuard(h.client, 'order:1');
    o.changeQty(1, 6);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 1,/);
    // The seq guard back at 3, order 1's seq 4 still parked.
    await setGuard(h.client, 'order:1', '3');
    const broken = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /^parked events \(waiting for a gap\) +0 +1 +FAIL\n +e\.g\. order:1:4: its aggregate's applied seq has reached the seq before it, it waits for nothing; outbox verify --repair queues it again$/m);
    assert.match((await runCli(['verify', '--repair', '--dry-run', '--settle', '0s'], h.env)).stdout, /^ +order:1:4 \(parked\)$/m);
    assert.match((await h.cli('verify', '--repair', '--yes', '--settle', '0s')).stdout, /^repair: 1 parked event\(s\) whose aggregate's applied seq had reached the seq before them queued again$/m);
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 0,/);
    await o.verify('0s');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
  });

  it("a pruned event's stale copy met after a partial loss is no evidence against the store: its taken seq is recorded, and the relay and status pass it over, as the store does not hold that event", async () => {
    o.place(1, { sku: 'SKU-A', qty: 1 });
    await runCli(['relay-crash'], h.env);
    await o.consume();
    // The crashed batch pushed again: a second copy, left queued.
    await o.relay();
    const [copy] = await h.client.lrange('outbox.events', 0, -1);
    assert.ok(copy, 'a second copy is queued');
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 1 PUBLISHED row/m);
    // A partial loss: the meta hash gone, the queue kept. The rebuild gives order:1 its pruned seq.
    await h.client.del('outbox:meta');
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 1,/);
    assert.equal(await h.client.hget('outbox:meta', 'takenEvent'), JSON.parse(copy).event_id, 'the copy was met as a taken seq');
    assert.match((await h.cli('status')).stdout, /^store +\S+: Redis serves it;/m);
    o.place(1, { sku: 'SKU-B', qty: 2 });
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 1,/);
    // (verify fails on the pruned event the loss took, as after any loss past a prune: not on this row.)
    assert.match((await runCli(['verify', '--settle', '0s'], h.env)).stdout, /^the store is not behind Redis +yes +yes +ok$/m);
  });

  it('verify --repair rebuilds it by hand, and a repeated loss during the rebuild only repeats it', async () => {
    await applyLifecycle();
    await h.client.flushall();
    const repaired = await runCli(['verify', '--repair'], h.env);
    assert.equal(repaired.code, 0, repaired.stderr);
    assert.match(repaired.stdout, /repair: Redis lost its state: rebuilding it from SQLite, 7 published event\(s\)/);
    // Lost again before the consumer ran: the next pass rebuilds again, nothing is missing.
    await h.client.flushall();
    await o.relay();
    await o.consume();
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), liveReserved());
  });

  it('after prune and a loss, verify names the events that cannot be rebuilt, and later events still apply', async () => {
    await applyLifecycle();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 7 PUBLISHED row/m);
    await h.client.flushall();
    o.changeQty(1, 6);
    const relayed = await h.cli('relay');
    assert.match(relayed.stdout, /7 event\(s\) of 4 aggregate\(s\) were pruned before the loss: their effects cannot be rebuilt/);
    // Order 1's seq 4 applies after its pruned seq 1-3: not parked for ever.
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 0/);
    const verify = await runCli(['verify'], h.env);
    assert.equal(verify.code, 1);
    assert.match(verify.stdout, /pruned events Redis lost \(effects cannot be rebuilt\) +0 +7 +FAIL\n +e\.g\. order:1 seq 1-3, order:2 seq 1-2, order:3 seq 1-1, order:4 seq 1-1/);
    assert.match(verify.stdout, /aggregates whose applied seq != last seq +0 +0 +ok/);
    assert.match(verify.stdout, /VERIFY FAILED/);
  });

  it('Redis restored from an older copy after a prune (its meta hash kept): verify names the pruned events it lost, --repair gives their aggregate its pruned seq and its parked event applies', async () => {
    o.place(3, { sku: 'SKU-A', qty: 1 });
    await o.relay();
    await o.consume();
    // The older copy of Redis: every key as it is now (DUMP), put back below after a FLUSHALL.
    const copy = await Promise.all((await h.client.keys('*')).map(async (key) => ({ key, value: await h.client.dumpBuffer(key), ttl: await h.client.pttl(key) })));
    o.changeQty(3, 9);
    await o.relay();
    await o.consume();
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 4 PUBLISHED row/m);
    await h.client.flushall();
    for (const { key, value, ttl } of copy) await h.client.restore(key, ttl > 0 ? ttl : 0, value);

    const before = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(before.code, 1);
    assert.match(before.stdout, /pruned events Redis lost \(effects cannot be rebuilt\) +0 +1 +FAIL\n +e\.g\. order:3 seq 2-2: applied seq behind the prune/);
    // Order 3's next event waits for a seq 2 that can never come again.
    o.changeQty(3, 11);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 0, parked 1/);

    const repaired = await h.cli('verify', '--repair', '--yes', '--settle', '0s');
    assert.match(repaired.stdout, /^repair: 1 aggregate\(s\) given their pruned seq \(1 pruned event\(s\) whose effects Redis lost, counted as unrecoverable\); 1 parked event\(s\) queued again$/m);
    assert.match((await h.cli('consume')).stdout, /applied 1, duplicates skipped 0, parked 0/);
    const after = await runCli(['verify', '--settle', '0s'], h.env);
    // The lost effect stays lost, and named; the order is no longer blocked.
    assert.match(after.stdout, /pruned events Redis lost \(effects cannot be rebuilt\) +0 +1 +FAIL/);
    assert.match(after.stdout, /aggregates whose applied seq != last seq +0 +0 +ok/);
    assert.match(after.stdout, /parked events \(waiting for a gap\) +0 +0 +ok/);
    assert.equal(await guardOf(h.client, 'order:3'), '3');
  });

  it('Redis restored after a prune from a copy taken while an applied seq was lost: only the pruned events after the last one the copy shows applied count as lost', async () => {
    o.place(1, { sku: 'SKU-A', qty: 1 });
    o.changeQty(1, 2);
    await o.relay();
    await o.consume();
    // The copy: order 1's seqs 1-2 applied (their processed entries and effects), its applied seq gone.
    await dropGuard(h.client, 'order:1');
    const copy = await Promise.all((await h.client.keys('*')).map(async (key) => ({ key, value: await h.client.dumpBuffer(key), ttl: await h.client.pttl(key) })));
    // Then its seq 3 applies (after --repair raised the seq), and all three are pruned.
    o.changeQty(1, 3);
    await o.relay();
    await h.cli('verify', '--repair', '--yes', '--settle', '0s');
    assert.match((await h.cli('consume')).stdout, /applied 1,/);
    assert.match((await h.cli('prune', '--older-than', '0s')).stdout, /^pruned 3 PUBLISHED row/m);
    await h.client.flushall();
    for (const { key, value, ttl } of copy) await h.client.restore(key, ttl > 0 ? ttl : 0, value);

    const broken = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /^pruned events Redis lost \(effects cannot be rebuilt\) +0 +1 +FAIL\n +e\.g\. order:1 seq 3-3: applied seq behind the prune/m);
    assert.match((await h.cli('verify', '--repair', '--yes', '--settle', '0s')).stdout, /^repair: 1 aggregate\(s\) given their pruned seq \(1 pruned event\(s\) whose effects Redis lost, counted as unrecoverable\)/m);
    assert.equal(await guardOf(h.client, 'order:1'), '3');
    assert.equal(await h.client.hget('outbox:meta', 'unrecoverable'), '1');
  });

  it('a relay paused between push and mark does not mark rows a replay set back to PENDING meanwhile', async () => {
    o.place(3);
    const db = new Database(join(h.env.dir, 'app.db'));
    db.pragma('busy_timeout = 5000');
    // Hold the write lock: the relay pushes, then waits to mark.
    db.prepare('BEGIN IMMEDIATE').run();
    const relay = startCli(['relay'], h.env);
    try {
      await waitFor(async () => (await h.client.llen('outbox.events')) === 3, { message: 'the relay did not push' });
      // Meanwhile another relay marked the rows, Redis lost them, and an operator replayed them.
      db.prepare("UPDATE outbox SET status = 'PUBLISHED', published_at = 1").run();
      await h.client.del('outbox.events');
      db.prepare("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED'").run();
      db.prepare("UPDATE outbox_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'replay_generation'").run();
    } finally {
      db.prepare('COMMIT').run();
      db.close();
    }
    assert.equal((await relay.done).code, 0);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 3, 'the paused relay marked replayed rows');
    assert.match((await h.cli('relay')).stdout, /relayed 3 events/);
    await o.consume();
    await o.verify();
  });
});

describe('a processing list no take recorded', () => {
  /** SCAN calls Redis answered since the last CONFIG RESETSTAT. */
  async function scans(): Promise<number> {
    return Number(/^cmdstat_scan:calls=(\d+)/m.exec(await h.client.info('commandstats'))?.[1] ?? 0);
  }

  /** `n` orders relayed and taken into the list of consumer `gone`, which then died; the set that records the lists lost. */
  async function strandInUnrecordedList(n: number): Promise<void> {
    o.place(n);
    await o.relay();
    defineScripts(h.client);
    assert.equal((await moveToProcessing(h.client, 'outbox.events:processing:gone', n)).length, n);
    await h.client.del('outbox:processing-lists');
  }

  it('verify and status read the lists the takes recorded and scan the keyspace only when an event is unaccounted for: the events of a list no take recorded are found, not lost', async () => {
    await strandInUnrecordedList(3);
    await h.client.config('RESETSTAT');
    const stranded = await runCli(['verify', '--settle', '0s'], h.env);
    assert.match(stranded.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    assert.ok((await scans()) > 0, 'the events the recorded lists did not hold were looked for in every list');

    // Recorded again (as the next consumer's scan does): nothing is unaccounted for, and nothing scans.
    await h.client.sadd('outbox:processing-lists', 'outbox.events:processing:gone');
    await h.client.config('RESETSTAT');
    const recorded = await runCli(['verify', '--settle', '0s'], h.env);
    assert.match(recorded.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    assert.match(recorded.stdout, /^still queued \/ in processing lists +- +0 \/ 3 +info$/m);
    assert.match((await h.cli('status')).stdout, /^processing +outbox\.events:processing:gone 3$/m);
    assert.equal(await scans(), 0);
  });

  it('more events unaccounted for than verify looks up one by one: those in a list no take recorded are still found, not lost', async () => {
    await strandInUnrecordedList(600);
    const verify = await runCli(['verify', '--settle', '0s'], h.env);
    assert.match(verify.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
  });
});

describe('namespaces', () => {
  it('two deployments share one Redis with independent state; no namespace keeps the seed key names', async () => {
    const a = { ...h.env, env: { OUTBOX_NAMESPACE: 'shop-a' } };
    const b = { dir: join(h.env.dir, 'b'), redisUrl: h.env.redisUrl, env: { OUTBOX_NAMESPACE: 'shop-b' } };
    const run = async (env: typeof a, ...args: string[]) => {
      const result = await runCli(args, env);
      assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`);
      return result;
    };
    await run(b, 'init');
    await run(a, 'place-order', '--sku', 'SKU-A', '--qty', '2', '--count', '3');
    await run(b, 'place-order', '--sku', 'SKU-A', '--qty', '7');
    await run(a, 'relay');
    await run(b, 'relay');
    await run(a, 'consume');
    await run(b, 'consume');
    assert.equal(await h.client.hget('shop-a:inventory:reserved', 'SKU-A'), '6');
    assert.equal(await h.client.hget('shop-b:inventory:reserved', 'SKU-A'), '7');
    assert.equal(await h.client.hlen('shop-a:processed'), 3);
    assert.equal(await h.client.hlen('shop-b:processed'), 1);
    assert.match((await run(a, 'verify')).stdout, /VERIFY OK/);
    assert.match((await run(b, 'verify')).stdout, /VERIFY OK/);

    // lab and init --force in one namespace leave the other alone.
    const keysOfA = (await h.client.keys('shop-a:*')).sort();
    await run(b, 'lab');
    assert.deepEqual((await h.client.keys('shop-a:*')).sort(), keysOfA);
    assert.match((await run(a, 'verify')).stdout, /VERIFY OK/);

    // The seed's own names, unprefixed, belong to the deployment without a namespace.
    assert.equal(await h.client.exists('processed', 'outbox.events', 'inventory:reserved'), 0);
    o.place(1);
    await o.relay();
    await o.consume();
    assert.equal(await h.client.hlen('processed'), 1);
    assert.equal(await h.client.hlen('shop-a:processed'), 3);
  });

  it('a Redis key of the wrong type (outbox:meta made a string) is reported in one line with exit 5, never a stack trace', async () => {
    o.place(1);
    await o.relay();
    await h.client.del('outbox:meta');
    await h.client.set('outbox:meta', 'garbage');
    for (const command of ['relay', 'verify', 'status', 'report']) {
      const result = await runCli([command], h.env);
      assert.equal(result.code, 5, `${command}: ${result.stderr}`);
      assert.match(result.stderr, /^outbox: Redis key outbox:meta holds another type than outbox keeps there \(something else wrote it\): move it away \(RENAME\) and run outbox verify; .+\n$/);
    }
    assert.equal(await h.client.get('outbox:meta'), 'garbage');
  });

  it('a hash verify reads in one MULTI (outbox:apply-count made a string) is named in its one line, exit 5', async () => {
    o.place(1);
    await o.relay();
    await o.consume();
    await h.client.set('outbox:apply-count', 'garbage');
    const result = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(result.code, 5, result.stdout + result.stderr);
    assert.match(result.stderr, /^outbox: Redis key outbox:apply-count holds another type than outbox keeps there \(something else wrote it\): move it away \(RENAME\) and run outbox verify; .+\n$/);
  });

  it('a bad namespace is refused in one line before anything connects', async () => {
    const result = await runCli(['relay'], { ...h.env, env: { OUTBOX_NAMESPACE: 'a:b*' } });
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^outbox: OUTBOX_NAMESPACE must be 1-64 letters, digits, "\.", "_" or "-", got "a:b\*"\n$/);
  });

  it('a namespace whose keys would overlap the unprefixed deployment is refused, and init --force there deletes nothing', async () => {
    o.place(1);
    await o.relay();
    await o.consume();
    const unprefixed = (await h.client.keys('*')).sort();
    for (const namespace of ['outbox', 'outbox.staging', 'inventory', 'bull']) {
      const result = await runCli(['init', '--force'], { ...h.env, dir: join(h.env.dir, 'other'), env: { OUTBOX_NAMESPACE: namespace } });
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, /^outbox: OUTBOX_NAMESPACE ".+" would share keys with the deployment without a namespace \(.+\): choose another name\n$/);
    }
    assert.deepEqual((await h.client.keys('*')).sort(), unprefixed);
    await o.verify();
  });
});

/** The relay app as a real process in `dir` and `namespace`. */
function startRelayApp(dir: string, namespace: string) {
  const app = startApp({ dir, redisUrl: h.env.redisUrl }, 'dist/apps/relay/main.js', ['--every', '300ms', '--slice', '300ms'], { OUTBOX_NAMESPACE: namespace });
  return { output: app.output, stop: () => stopApp(app) };
}

/** Relay jobs finished so far in a namespace's BullMQ queue. */
async function relayJobsDone(namespace: string): Promise<number> {
  const connection = new Redis(h.env.redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue(RELAY_QUEUE, { connection, prefix: `${namespace}:bull` });
  try {
    return (await queue.getJobCounts('completed')).completed;
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

describe('relay apps in namespaces', () => {
  it('two relay apps on one Redis each relay their own store; one whose Redis serves another store says so once and pushes nothing', async () => {
    const dirB = join(h.env.dir, 'b');
    assert.equal((await runCli(['init'], { ...h.env, dir: dirB })).code, 0);
    o.place(4);
    assert.equal((await runCli(['place-order', '--count', '3'], { ...h.env, dir: dirB })).code, 0);
    const a = startRelayApp(h.env.dir, 'ns-a');
    const b = startRelayApp(dirB, 'ns-b');
    try {
      await waitFor(async () => (await h.client.llen('ns-a:outbox.events')) === 4 && (await h.client.llen('ns-b:outbox.events')) === 3, {
        message: 'the two relay apps did not relay their own stores',
      });
      const storeOf = async (key: string) => new Set((await h.client.lrange(key, 0, -1)).map((raw) => JSON.parse(raw).store_id));
      assert.deepEqual(await storeOf('ns-a:outbox.events'), new Set([storeIdIn(h.env.dir)]));
      assert.deepEqual(await storeOf('ns-b:outbox.events'), new Set([storeIdIn(dirB)]));
      assert.ok((await h.client.keys('ns-a:bull:outbox-relay:*')).length > 0);
      assert.deepEqual(await h.client.keys('bull:*'), []);
    } finally {
      await a.stop();
      await b.stop();
    }

    // Store a's app.db recreated: its relay app refuses, in one log line, and relays nothing.
    for (const suffix of ['', '-wal', '-shm']) rmSync(join(h.env.dir, `app.db${suffix}`), { force: true });
    await h.cli('init');
    o.place(2);
    const doneBefore = await relayJobsDone('ns-a');
    const again = startRelayApp(h.env.dir, 'ns-a');
    try {
      await waitFor(async () => (await relayJobsDone('ns-a')) >= doneBefore + 3, { message: 'the relay app ran no job' });
      const refusals = again.output().split('\n').filter((line) => line.includes('but Redis at') && line.includes('serves store'));
      assert.equal(refusals.length, 1, again.output());
      assert.equal(JSON.parse(refusals[0]).level, 'error');
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 2);
      assert.equal(await h.client.llen('ns-a:outbox.events'), 4);
    } finally {
      await again.stop();
    }
  });
});
