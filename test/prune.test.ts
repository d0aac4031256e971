import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { beforeFirstDelete } from './helpers/prune-races.js';
import { count, readDb } from './helpers/stores.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { prune, sqlitePruneRows } from '../shared/operations/prune/prune.js';
import { parseReplayRange, replay } from '../shared/operations/recovery/repair.js';
import { dropGuard } from './helpers/guards.js';

const h = useHarness();
const o = orders(() => h.env);

/** The last line of `outbox prune`: how many old rows wait for the consumer. */
const kept = (stdout: string) => Number(/^kept \(not applied yet\): (\d+)$/m.exec(stdout)?.[1]);

describe('outbox prune', () => {
  it('deletes old PUBLISHED rows the consumer applied, in batches, and verify still reconciles', async () => {
    o.place(25, { sku: 'SKU-A', qty: 2 });
    o.changeQty(1, 5);
    o.cancel(2);
    await o.relay();
    await o.consume();
    const result = await h.cli('prune', '--older-than', '0s', '--batch-size', '10');
    assert.match(result.stdout, /^pruned 27 PUBLISHED row\(s\) in 3 batch\(es\), \d+ ms; the longest batch held the write lock [\d.]+ ms$/m);
    assert.equal(kept(result.stdout), 0);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox'), 0);
    assert.equal(count(h.env.dir, 'SELECT SUM(events) FROM outbox_pruned'), 27);
    assert.equal(count(h.env.dir, 'SELECT through_seq FROM outbox_pruned WHERE aggregate_id = \'order:1\''), 2);
    const verify = await h.cli('verify');
    assert.match(verify.stdout, /processed_unique = outbox rows \+ pruned +27 +27 +ok/);
    assert.match(verify.stdout, /VERIFY OK/);

    // A pruned aggregate goes on with the next seq, kept on the order row.
    o.changeQty(1, 7);
    assert.equal(count(h.env.dir, 'SELECT seq FROM outbox WHERE aggregate_id = \'order:1\''), 3);
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 1/);
    await o.verify();
  });

  it('deletes nothing the consumer has not applied: events lost from Redis afterwards can still be repaired', async () => {
    o.place(5);
    await o.relay();
    const early = await h.cli('prune', '--older-than', '0s');
    assert.match(early.stdout, /^pruned 0 PUBLISHED row/);
    assert.equal(kept(early.stdout), 5);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED'"), 5);

    await h.client.del('outbox.events');
    const broken = await runCli(['verify'], h.env);
    assert.equal(broken.code, 1);
    assert.match(broken.stdout, /events lost \(never applied, not in Redis\) +0 +5 +FAIL/);
    assert.match((await h.cli('verify', '--repair')).stdout, /repair: republished 5 lost event\(s\)/);
    await o.consume();
    await o.verify();
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-1'), '5');

    // Applied now: they go, and verify stays green.
    const late = await h.cli('prune', '--older-than', '0s');
    assert.match(late.stdout, /^pruned 5 PUBLISHED row/);
    assert.equal(kept(late.stdout), 0);
    await o.verify();
  });

  it('after a partial consume deletes only the applied prefix, so an aggregate keeps its unapplied seq and all after it', async () => {
    // rows 1-3: orders 1-3 seq 1; row 4: order 1 seq 2; row 5: order 2 seq 2; row 6: order 1 seq 3
    o.place(3);
    o.changeQty(1, 4);
    o.cancel(2);
    o.changeQty(1, 6);
    await o.relay();
    // Row 4's message is held back: the consumer applies rows 1-3 and 5, and parks row 6 (gap).
    const held = (await h.client.lindex('outbox.events', 3))!;
    assert.deepEqual([JSON.parse(held).aggregate_id, JSON.parse(held).seq], ['order:1', 2]);
    await h.client.lrem('outbox.events', 1, held);
    assert.match((await h.cli('consume')).stdout, /applied 4, .*parked 1/);

    const partial = await h.cli('prune', '--older-than', '0s', '--batch-size', '2');
    assert.match(partial.stdout, /^pruned 3 PUBLISHED row/);
    assert.equal(kept(partial.stdout), 3, 'rows 4-6 wait: 4 and 6 are not applied, 5 comes after 4');
    assert.deepEqual(readIds(), [4, 5, 6]);
    const pruned = readDb(h.env.dir);
    try {
      assert.deepEqual(pruned.prepare('SELECT aggregate_id, through_seq, events FROM outbox_pruned ORDER BY aggregate_id').all(), [
        { aggregate_id: 'order:1', through_seq: 1, events: 1 },
        { aggregate_id: 'order:2', through_seq: 1, events: 1 },
        { aggregate_id: 'order:3', through_seq: 1, events: 1 },
      ]);
    } finally {
      pruned.close();
    }

    await h.client.rpush('outbox.events', held);
    await o.consume();
    const rest = await h.cli('prune', '--older-than', '0s');
    assert.match(rest.stdout, /^pruned 3 PUBLISHED row/);
    assert.equal(count(h.env.dir, 'SELECT through_seq FROM outbox_pruned WHERE aggregate_id = \'order:1\''), 3);
    assert.equal(count(h.env.dir, 'SELECT through_seq FROM outbox_pruned WHERE aggregate_id = \'order:2\''), 2);
    await o.verify();
  });

  it('an event in processed is not applied for prune while its aggregate\'s applied seq is behind it', async () => {
    o.place(3);
    await o.relay();
    await o.consume();
    await dropGuard(h.client, 'order:2');
    const result = await h.cli('prune', '--older-than', '0s');
    assert.match(result.stdout, /^pruned 1 PUBLISHED row/);
    assert.equal(kept(result.stdout), 2);
    assert.deepEqual(readIds(), [2, 3]);
  });

  it('never deletes a PENDING row, nor anything after the first one, nor recent rows', async () => {
    o.place(7);
    await o.relay();
    await o.consume();
    await h.cli('replay', '--from', '6', '--to', '6');
    // rows 1-5 PUBLISHED, 6 PENDING, 7 PUBLISHED after it; all applied
    const result = await h.cli('prune', '--older-than', '0s');
    assert.match(result.stdout, /^pruned 5 PUBLISHED row/);
    assert.equal(kept(result.stdout), 0);
    assert.deepEqual(readIds(), [6, 7]);

    o.place(3);
    await o.relay();
    await o.consume();
    const recent = await h.cli('prune', '--older-than', '1h');
    assert.match(recent.stdout, /^pruned 0 PUBLISHED row/);
    assert.equal(kept(recent.stdout), 0);
  });

  it('a replay that sets a row back to PENDING between prune\'s read and its delete: that row and every row after it stay (in that batch and the next), so no aggregate is recorded pruned past an event the store holds; after a Redis loss the rebuild applies it again and the relay goes on', async () => {
    // Rows 1-4: order:1 seq 1, order:2 seq 1, order:1 seq 2, order:2 seq 2.
    const db = openDatabase(h.env.dir);
    const service = createOrderService(db);
    service.placeOrder({ sku: 'SKU-A', qty: 1 });
    service.placeOrder({ sku: 'SKU-B', qty: 1 });
    service.changeQty(1, 2);
    service.changeQty(2, 3);
    await o.relay();
    await o.consume();
    const redis = await connectRedis(h.env.redisUrl);
    try {
      const rows = sqlitePruneRows(db);
      /** prune's rows, row 1 replayed (another process's `outbox replay`) just before the first delete. */
      const racing = () => beforeFirstDelete(rows, () => assert.equal(replay(db, parseReplayRange('1', '1')), 1));
      const pruned = () => db.prepare('SELECT aggregate_id, through_seq FROM outbox_pruned ORDER BY aggregate_id').all();
      const ids = () => db.prepare('SELECT id FROM outbox ORDER BY id').pluck().all();

      // Two rows a batch: the first batch (rows 1, 2) deletes nothing, and prune stops before row 3, order:1's next event.
      const first = await prune(racing(), redis, 0, { batchSize: 2 });
      assert.deepEqual([first.deleted, first.stoppedEarly], [0, true]);
      assert.deepEqual(ids(), [1, 2, 3, 4]);
      assert.deepEqual(pruned(), []);

      // Row 1 relayed and applied again; then the same race in one batch of all four rows.
      await o.relay();
      await o.consume();
      assert.equal((await prune(racing(), redis, 0)).deleted, 0);
      assert.deepEqual(ids(), [1, 2, 3, 4]);
      assert.deepEqual(pruned(), []);
    } finally {
      redis.disconnect();
      db.close();
    }

    // Redis lost: rebuilt from the store, every event applied again, none taken for another's duplicate.
    await h.client.flushall();
    assert.match((await h.cli('relay')).stdout, /Redis lost its state/);
    await o.consume();
    assert.equal(await h.client.hexists('outbox:meta', 'takenEvent'), 0);
    assert.match((await h.cli('relay')).stdout, /^relayed 0 events/m);
    await o.verify('0s');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '2', 'SKU-B': '3' });
  });

  it('fails with one line and exit 5 when Redis is unreachable, deleting nothing', async () => {
    o.place(2);
    await o.relay();
    await o.consume();
    const result = await runCli(['prune', '--older-than', '0s'], { ...h.env, redisUrl: 'redis://127.0.0.1:1' });
    assert.equal(result.code, 5);
    assert.match(result.stderr, /^outbox: cannot connect to Redis at redis:\/\/127\.0\.0\.1:1 .*$/m);
    assert.equal(result.stderr.trim().split('\n').length, 1);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox'), 2);
  });

  it('rejects a bad window with one line', async () => {
    const result = await runCli(['prune', '--older-than', 'a week'], h.env);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "a week": write a number and a unit \(ms, s, m, h or d\)$/m);
  });

  it('the relay app prunes on a schedule when OUTBOX_PRUNE_OLDER_THAN is set, and waits for the consumer', async () => {
    o.place(20);
    const relay = spawn(process.execPath, [join(REPO_ROOT, 'dist/apps/relay/main.js'), '--every', '300ms', '--slice', '300ms'], {
      env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl, OUTBOX_PRUNE_OLDER_THAN: '0s', OUTBOX_PRUNE_EVERY: '500ms' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    relay.stdout.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => relay.on('exit', resolve));
    try {
      // Relayed, then a scheduled prune found the 20 rows and kept them: nothing is applied yet.
      await waitFor(() => /"msg":"outbox pruned","deleted":0,"keptNotApplied":20/.test(output), { timeoutMs: 15_000, message: 'no prune saw the relayed rows' });
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED'"), 20);
      assert.equal(await h.client.llen('outbox.events'), 20);

      await o.consume();
      await waitFor(() => count(h.env.dir, 'SELECT COUNT(*) FROM outbox') === 0, { timeoutMs: 15_000, message: 'nothing was pruned after the consumer applied the events' });
      await waitFor(() => /"msg":"outbox pruned","deleted":[1-9]\d*,"keptNotApplied":0/.test(output));
    } finally {
      relay.kill('SIGTERM');
      await exited;
    }
    assert.equal(count(h.env.dir, 'SELECT SUM(events) FROM outbox_pruned'), 20);
    await o.verify();
  });
});

function readIds(): number[] {
  const db = readDb(h.env.dir);
  try {
    return db.prepare('SELECT id FROM outbox ORDER BY id').pluck().all() as number[];
  } finally {
    db.close();
  }
}
