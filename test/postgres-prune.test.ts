import assert from 'node:assert/strict';
import { after, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import type { Pool, PoolClient } from 'pg';
import { createConsumer, createPgOutbox, createPgRelay } from '../shared/outbox/index.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { prune, type PruneRows } from '../shared/operations/prune/prune.js';
import { pgPruneRows } from '../shared/operations/prune/pg-prune.js';
import { pgReplay } from '../shared/operations/recovery/pg-repair.js';
import { parseReplayRange } from '../shared/operations/recovery/repair.js';
import { startApp, stopApp } from './helpers/apps.js';
import { orders } from './helpers/orders.js';
import { afterFirstRead, beforeFirstDelete } from './helpers/prune-races.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { useHarness } from './helpers/harness.js';
import { pgCliEnv, pgCommands, usePostgres } from './helpers/postgres.js';
import { handlers as accountHandlers } from './fixtures/account-handlers.js';
import { handlers as labHandlers } from '../shared/lab/orders/order-handlers.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../shared/outbox/redis/connect-partitions.js';
import { startRedisCluster } from './helpers/redis-cluster.js';
import { depositEvents } from './fixtures/pg-accounts.js';

// `outbox prune` on the PostgreSQL store: the same guard as on app.db (only what the consumer
// applied, only a prefix in id order), and never a row whose producer has not committed yet.
const db = usePostgres();
const h = useHarness({ init: false });

beforeEach(async () => {
  await db.reset();
  await db.scalar('DROP TABLE IF EXISTS orders');
});
let redis: Redis | undefined;
after(() => redis?.disconnect());

const { pgCli, ok } = pgCommands(db, h);
/** The steps before each test's subject, in this process (helpers/orders.ts). */
const o = orders(() => pgCliEnv(db, h));
const kept = (stdout: string) => Number(/^kept \(not applied yet\): (\d+)$/m.exec(stdout)?.[1]);
const ids = async () => (await db.pool(1).query<{ id: number }>('SELECT id::int FROM outbox ORDER BY id')).rows.map((r) => r.id);
const prunedRows = async () => (await db.pool(1).query('SELECT aggregate_id, through_seq::int, events::int FROM outbox_pruned ORDER BY aggregate_id')).rows;

describe('outbox prune on PostgreSQL', () => {
  it('deletes old PUBLISHED rows the consumer applied, in batches, recording them in outbox_pruned; verify still reconciles and the aggregate goes on', async () => {
    await o.init();
    await o.pg.place(25);
    await o.pg.changeQty(1, 5);
    await o.pg.cancel(2);
    await o.relay();
    await o.consume();
    const dry = await ok('prune', '--older-than', '0s', '--dry-run');
    assert.match(dry.stdout, /^prune would delete 27 PUBLISHED row\(s\) \(ids 1-27\) the consumer applied; kept \(not applied yet\): 0$/m);
    assert.equal((await ids()).length, 27, 'dry run: nothing deleted');
    const result = await ok('prune', '--older-than', '0s', '--batch-size', '10', '--yes');
    assert.match(result.stdout, /^pruned 27 PUBLISHED row\(s\) in 3 batch\(es\), \d+ ms; the longest batch took [\d.]+ ms$/m);
    assert.equal(kept(result.stdout), 0);
    assert.deepEqual(await ids(), []);
    assert.equal(await db.scalar('SELECT SUM(events)::int FROM outbox_pruned'), 27);
    assert.equal(await db.scalar("SELECT through_seq::int FROM outbox_pruned WHERE aggregate_id = 'order:1'"), 2);
    assert.match(await o.verify('0s'), /^processed_unique = outbox rows \+ pruned +27 +27 +ok$[\s\S]*^VERIFY OK$/m);

    await o.pg.changeQty(1, 7);
    assert.equal(await db.scalar("SELECT seq::int FROM outbox WHERE aggregate_id = 'order:1'"), 3);
    await o.relay();
    await o.consume();
    await o.verify('0s');
  });

  it('Redis restored from an older copy after a prune (its meta hash kept): verify names the pruned event it lost, --repair gives its order its pruned seq and the parked event applies', async () => {
    await o.init();
    await o.pg.place(3);
    await o.relay();
    await o.consume();
    const copy = await Promise.all((await h.client.keys('*')).map(async (key) => ({ key, value: await h.client.dumpBuffer(key), ttl: await h.client.pttl(key) })));
    await o.pg.changeQty(3, 9);
    await o.relay();
    await o.consume();
    await ok('prune', '--older-than', '0s', '--yes');
    await h.client.flushall();
    for (const { key, value, ttl } of copy) await h.client.restore(key, ttl > 0 ? ttl : 0, value);

    const before = await pgCli(['verify', '--settle', '0s']);
    assert.equal(before.code, 1);
    assert.match(before.stdout, /pruned events Redis lost \(effects cannot be rebuilt\) +0 +1 +FAIL\n +e\.g\. order:3 seq 2-2: applied seq behind the prune/);
    await o.pg.changeQty(3, 11);
    await o.relay();
    assert.match((await ok('consume')).stdout, /applied 0, duplicates skipped 0, parked 1/);
    assert.match((await ok('verify', '--repair', '--yes', '--settle', '0s')).stdout, /^repair: 1 aggregate\(s\) given their pruned seq \(1 pruned event\(s\) whose effects Redis lost, counted as unrecoverable\); 1 parked event\(s\) queued again$/m);
    assert.match((await ok('consume')).stdout, /applied 1, duplicates skipped 0, parked 0/);
    const after = await pgCli(['verify', '--settle', '0s']);
    assert.match(after.stdout, /aggregates whose applied seq != last seq +0 +0 +ok/);
    assert.match(after.stdout, /parked events \(waiting for a gap\) +0 +0 +ok/);
  });

  it('with the consumer behind deletes only the applied prefix in id order: an aggregate keeps its unapplied seq and all after it; nothing unapplied can be lost', async () => {
    // rows 1-3: orders 1-3 seq 1; row 4: order 1 seq 2; row 5: order 2 seq 2; row 6: order 1 seq 3
    await o.init();
    await o.pg.place(3);
    await o.pg.changeQty(1, 4);
    await o.pg.cancel(2);
    await o.pg.changeQty(1, 6);
    await o.relay();
    const held = (await h.client.lindex('outbox.events', 3))!;
    assert.deepEqual([JSON.parse(held).aggregate_id, JSON.parse(held).seq], ['order:1', 2]);
    await h.client.lrem('outbox.events', 1, held);
    assert.match((await ok('consume')).stdout, /applied 4, .*parked 1/);

    const partial = await ok('prune', '--older-than', '0s', '--batch-size', '2');
    assert.match(partial.stdout, /^pruned 3 PUBLISHED row/);
    assert.equal(kept(partial.stdout), 3, 'rows 4-6 wait: 4 and 6 are not applied, 5 comes after 4');
    assert.deepEqual(await ids(), [4, 5, 6]);
    assert.deepEqual(await prunedRows(), [
      { aggregate_id: 'order:1', through_seq: 1, events: 1 },
      { aggregate_id: 'order:2', through_seq: 1, events: 1 },
      { aggregate_id: 'order:3', through_seq: 1, events: 1 },
    ]);
    // The held event is lost from Redis: its row is still there, so verify --repair republishes it.
    const lost = await pgCli(['verify', '--settle', '0s']);
    assert.equal(lost.code, 1, lost.stdout + lost.stderr);
    assert.match(lost.stdout, /^events lost \(never applied, not in Redis\) +0 +1 +FAIL$/m);
    assert.match((await ok('verify', '--repair', '--settle', '0s')).stdout, /^repair: republished 1 lost event\(s\)/m);
    await o.consume();
    const rest = await ok('prune', '--older-than', '0s');
    assert.match(rest.stdout, /^pruned 3 PUBLISHED row/);
    assert.equal(await db.scalar("SELECT through_seq::int FROM outbox_pruned WHERE aggregate_id = 'order:1'"), 3);
    await o.verify('0s');

    // Never a PENDING row nor anything after it, nor a recent row.
    await o.pg.place(3);
    await o.relay();
    await o.consume();
    await ok('replay', '--from', '8', '--to', '8');
    const pendingFirst = await ok('prune', '--older-than', '0s');
    assert.match(pendingFirst.stdout, /^pruned 1 PUBLISHED row/);
    assert.deepEqual(await ids(), [8, 9]);
    await o.relay();
    await o.consume();
    assert.match((await ok('prune', '--older-than', '1h')).stdout, /^pruned 0 PUBLISHED row/);
  });

  const deposit = (aggregateId: string) => ({ aggregateType: 'account' as const, aggregateId, type: 'Deposited' as const, payload: { amount: 1 } });

  /** The accounts' consumer drains the queue. */
  async function drain(): Promise<void> {
    const consumer = await createConsumer({ redis: redis!, handlers: accountHandlers, consumerId: 'accounts' });
    await consumer.drain();
    await consumer.close();
  }

  /**
   * Account a's 3 deposits (ids 1-3), the late deposit (id 4) in a transaction held open, account
   * b's 3 (ids 5-7); the 6 committed ones relayed and applied; then `meanwhile`, with the held
   * transaction still open (it commits or rolls back there, or is released after).
   */
  async function withLateRow(meanwhile: (late: PoolClient, pool: Pool, relay: ReturnType<typeof createPgRelay>) => Promise<void>): Promise<{ pool: Pool; relay: ReturnType<typeof createPgRelay> }> {
    const pool = db.pool(4);
    redis ??= await connectRedis(h.redis.url);
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    const relay = createPgRelay(pool, redis);
    for (let i = 0; i < 3; i += 1) await outbox.append(pool, deposit('a'));
    const late = await pool.connect();
    try {
      await late.query('BEGIN');
      await outbox.append(late, deposit('late'));
      for (let i = 0; i < 3; i += 1) await outbox.append(pool, deposit('b'));
      assert.equal((await relay.relayAll()).events, 6);
      await drain();
      await meanwhile(late, pool, relay);
    } finally {
      late.release();
    }
    return { pool, relay };
  }

  it('the commit-order trap: a row whose producer has not committed is not visible to prune, and is neither deleted nor counted pruned; once committed it is relayed, applied and pruned', async () => {
    const { pool, relay } = await withLateRow(async (late) => {
      const result = await ok('prune', '--older-than', '0s');
      assert.match(result.stdout, /^pruned 6 PUBLISHED row\(s\)/m);
      assert.deepEqual(await prunedRows(), [
        { aggregate_id: 'account:a', through_seq: 3, events: 3 },
        { aggregate_id: 'account:b', through_seq: 3, events: 3 },
      ]);
      await late.query('COMMIT');
    });
    assert.deepEqual((await pool.query("SELECT id::int, aggregate_id, status FROM outbox")).rows, [{ id: 4, aggregate_id: 'account:late', status: 'PENDING' }]);
    assert.equal((await relay.relayAll()).events, 1);
    await drain();
    assert.match((await ok('prune', '--older-than', '0s')).stdout, /^pruned 1 PUBLISHED row/m);
    assert.match(await o.verify('0s'), /^processed_unique = outbox rows \+ pruned +7 +7 +ok$[\s\S]*^VERIFY OK$/m);
  });

  it('a row that commits below the ids prune read, and is relayed and marked before prune deletes, is not deleted: prune deletes only the rows it found applied', async () => {
    const { pool } = await withLateRow(async (late, pool, relay) => {
      // Between prune's read of its batch and its delete, row 4 commits and the relay pushes and marks it.
      const racing = afterFirstRead(pgPruneRows(pool), async () => {
        await late.query('COMMIT');
        assert.equal((await relay.relayAll()).events, 1);
      });
      assert.equal((await prune(racing, redis!, 0)).deleted, 6);
    });
    assert.deepEqual((await pool.query('SELECT id::int, aggregate_id, status FROM outbox')).rows, [{ id: 4, aggregate_id: 'account:late', status: 'PUBLISHED' }], 'the row the consumer has not applied is kept');
    assert.deepEqual(await prunedRows(), [
      { aggregate_id: 'account:a', through_seq: 3, events: 3 },
      { aggregate_id: 'account:b', through_seq: 3, events: 3 },
    ]);
  });

  it('a replay that sets a row back to PENDING between prune\'s read and its delete: that row and every row after it stay (in that batch and the next), so no aggregate is recorded pruned past an event the store holds; after a Redis loss the rebuild applies it again', async () => {
    // Rows 1-4: order:1 seq 1, order:2 seq 1, order:1 seq 2, order:2 seq 2.
    await o.init();
    await o.pg.place(2);
    await o.pg.changeQty(1, 2);
    await o.pg.changeQty(2, 3);
    await o.relay();
    await o.consume();
    const pool = db.pool(2);
    redis ??= await connectRedis(h.redis.url);
    const rows = pgPruneRows(pool);
    /** prune's rows, row 1 replayed (another process's `outbox replay`) just before the first delete. */
    const racing = () => beforeFirstDelete(rows, async () => assert.equal(await pgReplay(pool, parseReplayRange('1', '1')), 1));
    // Two rows a batch: the first batch (rows 1, 2) deletes nothing, and prune stops before row 3, order:1's next event.
    assert.equal((await prune(racing(), redis, 0, { batchSize: 2 })).deleted, 0);
    assert.deepEqual(await ids(), [1, 2, 3, 4]);
    assert.deepEqual(await prunedRows(), []);
    // Row 1 relayed and applied again; then the same race in one batch of all four rows.
    await o.relay();
    await o.consume();
    assert.equal((await prune(racing(), redis, 0)).deleted, 0);
    assert.deepEqual(await ids(), [1, 2, 3, 4]);
    assert.deepEqual(await prunedRows(), []);

    await h.client.flushall();
    assert.match((await ok('relay')).stdout, /Redis lost its state/);
    await o.consume();
    assert.equal(await h.client.hexists('outbox:meta', 'takenEvent'), 0);
    await o.verify('0s');
  });

  for (const replayed of [false, true]) {
    it(`a row committed late below the rows prune read${replayed ? ', then replayed,' : ''} and its aggregate's next event read by a later batch of the same run: that aggregate keeps its rows, and is not recorded pruned past the late one`, async () => {
      const { pool } = await withLateRow(async (late, pool, relay) => {
        const outbox = await createPgOutbox(pool, { events: depositEvents });
        const rows = pgPruneRows(pool);
        let deletes = 0;
        const racing: PruneRows = {
          // After the first batch's read (ids 1-3 and 5-7): row 4 commits, then account late's seq 2 (row 8); both relayed and applied.
          ...afterFirstRead(rows, async () => {
            await late.query('COMMIT');
            await outbox.append(pool, deposit('late'));
            assert.equal((await relay.relayAll()).events, 2);
            await drain();
          }),
          async deleteRange(after, through, ids) {
            // Before the second batch's delete (row 8): `outbox replay` sets row 4 back to PENDING.
            if ((deletes += 1) === 2 && replayed) assert.equal(await pgReplay(pool, parseReplayRange('4', '4')), 1);
            return rows.deleteRange(after, through, ids);
          },
        };
        // (Its clock a minute ahead: row 8, written during the run, is old enough too, as a producer's row is
        // whose transaction waited on its aggregate's lock.)
        const result = await prune(racing, redis!, 0, { now: Date.now() + 60_000 });
        assert.equal(result.deleted, 6);
        assert.equal(result.stoppedEarly, true);
        assert.equal(deletes, 2, 'the second batch reached its delete');
      });
      assert.deepEqual((await pool.query('SELECT id::int, aggregate_id, seq::int, status FROM outbox ORDER BY id')).rows, [
        { id: 4, aggregate_id: 'account:late', seq: 1, status: replayed ? 'PENDING' : 'PUBLISHED' },
        { id: 8, aggregate_id: 'account:late', seq: 2, status: 'PUBLISHED' },
      ]);
      assert.deepEqual(await prunedRows(), [
        { aggregate_id: 'account:a', through_seq: 3, events: 3 },
        { aggregate_id: 'account:b', through_seq: 3, events: 3 },
      ]);
    });
  }

  it('the relay app on PostgreSQL prunes on its schedule (OUTBOX_PRUNE_OLDER_THAN) what the consumer applied, and keeps what it has not', async () => {
    await o.init();
    await o.pg.place(20);
    const relay = startApp(h.env, 'dist/apps/relay/main.js', [], { OUTBOX_DATABASE_URL: db.url, OUTBOX_RELAY_POLL: '20ms', OUTBOX_PRUNE_OLDER_THAN: '0s', OUTBOX_PRUNE_EVERY: '500ms' });
    try {
      // Relayed, then a scheduled prune found the 20 rows and kept them: nothing is applied yet.
      await waitFor(() => /"msg":"outbox pruned","deleted":0,"keptNotApplied":20/.test(relay.output()), { timeoutMs: 15_000, message: relay.output() });
      assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PUBLISHED'"), 20);
      await o.consume();
      await waitFor(async () => (await db.scalar<number>('SELECT COUNT(*)::int FROM outbox')) === 0, { timeoutMs: 15_000, message: relay.output() });
    } finally {
      assert.equal((await stopApp(relay)).code, 0, relay.output());
    }
    assert.equal(await db.scalar('SELECT SUM(events)::int FROM outbox_pruned'), 20);
    await o.verify('0s');
  });

  it('the relay app on PostgreSQL across partitions prunes on schedule, rows the window swept too', async () => {
    const env = pgCliEnv(db, h, { OUTBOX_PARTITIONS: '3' });
    const p = orders(() => env);
    await p.init();
    await p.pg.place(12);
    const prunes = { OUTBOX_RELAY_POLL: '20ms', OUTBOX_PRUNE_OLDER_THAN: '0s', OUTBOX_PRUNE_EVERY: '500ms' };
    const relay = startApp(h.env, 'dist/apps/relay/main.js', [], { ...env.env, ...prunes });
    const target = { redisUrl: h.env.redisUrl, partitions: 3 };
    const partitions = await connectTargetPartitions(target, (options) => connectTarget(target, options));
    const consumer = await createConsumer({
      redis: partitions,
      handlers: labHandlers,
      consumerId: 'window',
      dedupeWindowMs: 1000,
    });
    const hlens = () => Promise.all(partitions.clients.map((client) => client.hlen('processed')));
    const processed = async () => (await hlens()).reduce((a, b) => a + b);
    const rows = (where = '') => db.scalar<number>(`SELECT COUNT(*)::int FROM outbox ${where}`);
    try {
      const seen = () => /"msg":"outbox pruned","deleted":0,"keptNotApplied":12/.test(relay.output());
      await waitFor(seen, { timeoutMs: 15_000, message: relay.output() });
      // Applied, and their records swept by the window (each drain ends with a sweep) before prune may see them.
      relay.child.kill('SIGSTOP');
      await consumer.drain();
      assert.equal(await processed(), 12);
      await waitFor(async () => (await consumer.drain(), (await processed()) === 0), { timeoutMs: 10_000 });
      relay.child.kill('SIGCONT');
      await waitFor(async () => (await rows()) === 0, { timeoutMs: 15_000, message: relay.output() });
      assert.equal(await db.scalar('SELECT SUM(events)::int FROM outbox_pruned'), 12);
      // The next events of the same orders, applied inside the window, go too.
      await p.pg.changeQty(1, 4);
      await p.pg.changeQty(2, 4);
      await waitFor(async () => (await rows("WHERE status = 'PUBLISHED'")) === 2, { timeoutMs: 15_000 });
      await consumer.drain();
      await waitFor(async () => (await rows()) === 0, { timeoutMs: 15_000, message: relay.output() });
    } finally {
      relay.child.kill('SIGCONT');
      await consumer.close();
      await closePartitions(partitions);
      assert.equal((await stopApp(relay)).code, 0, relay.output());
    }
    assert.equal(await db.scalar('SELECT SUM(events)::int FROM outbox_pruned'), 14);
    assert.doesNotMatch(relay.output(), /prune job failed/);
  });

  it('the relay app on PostgreSQL on a Redis Cluster prunes on a timer of its own (no BullMQ there)', async () => {
    const cluster = await startRedisCluster();
    try {
      const env = pgCliEnv(db, h, { OUTBOX_REDIS_CLUSTER: cluster.nodes.join(','), OUTBOX_PARTITIONS: '2' });
      const p = orders(() => env);
      await p.init();
      await p.pg.place(6);
      const prunes = { OUTBOX_RELAY_POLL: '20ms', OUTBOX_PRUNE_OLDER_THAN: '0s', OUTBOX_PRUNE_EVERY: '500ms' };
      const relay = startApp(h.env, 'dist/apps/relay/main.js', [], { ...env.env, ...prunes });
      try {
        const seen = () => /"msg":"outbox pruned","deleted":0,"keptNotApplied":6/.test(relay.output());
        await waitFor(seen, { timeoutMs: 15_000, message: relay.output() });
        await p.consume();
        const rows = () => db.scalar<number>('SELECT COUNT(*)::int FROM outbox');
        await waitFor(async () => (await rows()) === 0, { timeoutMs: 15_000, message: relay.output() });
      } finally {
        assert.equal((await stopApp(relay)).code, 0, relay.output());
      }
      assert.equal(await db.scalar('SELECT SUM(events)::int FROM outbox_pruned'), 6);
    } finally {
      await cluster.stop();
    }
  });
});
