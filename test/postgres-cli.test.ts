import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, it } from 'node:test';
import { useHarness } from './helpers/harness.js';
import { pgCliEnv, pgCommands, usePostgres } from './helpers/postgres.js';
import { orders } from './helpers/orders.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { createPgOutbox } from '../shared/outbox/index.js';
import { orderEvents } from '../shared/lab/orders/order-events.js';

// The CLI on the PostgreSQL store: --database / OUTBOX_DATABASE_URL, this file's own database.
const db = usePostgres();
const h = useHarness({ init: false });

beforeEach(async () => {
  await db.reset();
  await db.scalar('DROP TABLE IF EXISTS orders');
});

const { pgCli, ok, refused } = pgCommands(db, h);
/** The steps before a test's subject, in this process (helpers/orders.ts). */
const o = orders(() => pgCliEnv(db, h));


const rows = async (sql: string) => (await db.pool(1).query(sql)).rows;

describe('outbox on PostgreSQL: the seed\'s steps', () => {
  it('init, place-order, change-qty, cancel-order write orders and events in pg; relay, consume and report give the numbers of the SQLite store', async () => {
    assert.match((await ok('init')).stdout, new RegExp(`^created the orders and outbox tables in PostgreSQL database ${db.name}$`, 'm'));
    assert.match((await ok('place-order', '--sku', 'SKU-A', '--qty', '2')).stdout, /^placed order 1 \(SKU-A x2\), event [0-9a-f-]{36}$/m);
    await ok('place-order', '--count', '2');
    assert.match((await ok('change-qty', '--id', '1', '--qty', '5')).stdout, /^order 1 now SKU-A x5, event [0-9a-f-]{36} \(seq 2\)$/m);
    assert.match((await ok('cancel-order', '--id', '2')).stdout, /^order 2 cancelled, event [0-9a-f-]{36} \(seq 2\)$/m);

    assert.deepEqual(await rows('SELECT id::int, sku, qty::int, status FROM orders ORDER BY id'), [
      { id: 1, sku: 'SKU-A', qty: 5, status: 'PLACED' },
      { id: 2, sku: 'SKU-1', qty: 1, status: 'CANCELLED' },
      { id: 3, sku: 'SKU-1', qty: 1, status: 'PLACED' },
    ]);
    assert.deepEqual(await rows('SELECT aggregate_id, seq::int, event_type, payload, status FROM outbox ORDER BY id'), [
      { aggregate_id: 'order:1', seq: 1, event_type: 'OrderPlaced', payload: '{"orderId":1,"sku":"SKU-A","qty":2}', status: 'PENDING' },
      { aggregate_id: 'order:2', seq: 1, event_type: 'OrderPlaced', payload: '{"orderId":2,"sku":"SKU-1","qty":1}', status: 'PENDING' },
      { aggregate_id: 'order:3', seq: 1, event_type: 'OrderPlaced', payload: '{"orderId":3,"sku":"SKU-1","qty":1}', status: 'PENDING' },
      { aggregate_id: 'order:1', seq: 2, event_type: 'OrderQtyChanged', payload: '{"orderId":1,"sku":"SKU-A","qty":5,"previousQty":2}', status: 'PENDING' },
      { aggregate_id: 'order:2', seq: 2, event_type: 'OrderCancelled', payload: '{"orderId":2,"sku":"SKU-1","qty":1}', status: 'PENDING' },
    ]);
    const status = (await ok('status')).stdout;
    assert.match(status, /^store +[0-9a-f]{16}: Redis serves no store yet/m);
    assert.match(status, /^outbox +pending 5,/m);

    assert.match((await ok('relay')).stdout, /^relayed 5 events in 1 batch .*; LLEN outbox\.events = 5$/m);
    assert.match((await ok('relay')).stdout, /^relayed 0 events in 0 batches/m);
    assert.deepEqual(await rows("SELECT COUNT(*)::int AS n FROM outbox WHERE status = 'PUBLISHED' AND published_at IS NOT NULL"), [{ n: 5 }]);
    assert.match((await ok('order-check')).stdout, /ORDER OK/);
    await ok('consume');
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '5', 'SKU-1': '1' });
    assert.equal((await ok('report')).stdout.split('\n').slice(0, 4).join('\n'), 'orders=3\noutbox=5\nenqueued=5\nprocessed_unique=5');
    assert.equal(readFileSync(join(h.env.dir, 'report.txt'), 'utf8'), 'orders=3\noutbox=5\nenqueued=5\nprocessed_unique=5\n');
    assert.match((await ok('verify')).stdout, /^orders with missing events +0 +0 +ok$[\s\S]*^SKUs whose reserved qty != live orders +0 +0 +ok$[\s\S]*^VERIFY OK$/m);
    const after = (await ok('status', '--json')).stdout;
    assert.deepEqual(JSON.parse(after).store.redis, 'serves');
    assert.equal(JSON.parse(after).pending, 0);
  });

  it('relay-crash dies between push and commit; its batch stays PENDING and the next relay pushes it again: a duplicate dup-check finds and consume absorbs', async () => {
    await o.init();
    await o.pg.place(1);
    const crashed = await pgCli(['relay-crash']);
    assert.equal(crashed.signal, 'SIGKILL', crashed.stdout + crashed.stderr);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 1);
    // Its session (and the row lock of its batch) ends once PostgreSQL sees the socket closed.
    await waitFor(async () => Number(await db.scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'outbox-cli'")) === 0, { message: 'the killed relay\'s session stayed' });
    assert.match((await ok('relay')).stdout, /^relayed 1 event in 1 batch/m);
    const eventId = await db.scalar('SELECT event_id FROM outbox');
    assert.match((await ok('dup-check')).stdout, new RegExp(`^DUPLICATE event_id=${eventId} count=2$`, 'm'));
    assert.match((await ok('consume')).stdout, /applied 1, duplicates skipped 1/);
  });

  it('refuses an unknown order (exit 3) and a cancelled one (exit 4) with the SQLite store\'s messages, writing nothing', async () => {
    await o.init();
    await o.pg.place(1);
    await o.pg.cancel(1);
    refused(await pgCli(['change-qty', '--id', '7', '--qty', '2']), 3, /^outbox: no order 7: cannot change its quantity$/);
    refused(await pgCli(['cancel-order', '--id', '1']), 4, /^outbox: order 1 is already cancelled: cannot cancel it$/);
    refused(await pgCli(['change-qty', '--id', '1', '--qty', '2']), 4, /^outbox: order 1 is already cancelled: cannot change its quantity$/);
    assert.deepEqual(await rows('SELECT aggregate_id, seq::int FROM outbox ORDER BY id'), [
      { aggregate_id: 'order:1', seq: 1 },
      { aggregate_id: 'order:1', seq: 2 },
    ]);
    assert.deepEqual(await rows('SELECT last_seq::int FROM outbox_aggregates'), [{ last_seq: 2 }]);
  });

  it('init refuses a database that has the outbox tables (exit 4, nothing changed); --force drops them and this project\'s Redis keys only', async () => {
    await o.init();
    await o.pg.place(2);
    await o.relay();
    const storeId = await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'");
    await h.client.set('someone-else:key', 'keep me');
    refused(await pgCli(['init']), 4, new RegExp(`^outbox: PostgreSQL database ${db.name} already has the outbox tables: pass --force to drop them and start over`));
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 2);

    const dry = await ok('init', '--force', '--dry-run');
    assert.match(dry.stdout, new RegExp(`^init --force would delete the outbox tables of PostgreSQL database ${db.name} with 2 order\\(s\\), 2 outbox row\\(s\\) and 0 pruned-aggregate record\\(s\\), delete \\d+ Redis key\\(s\\)`, 'm'));
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 2);

    await ok('init', '--force');
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM orders'), 0);
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 0);
    assert.notEqual(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'"), storeId, 'a new store');
    assert.deepEqual(await h.client.keys('*'), ['someone-else:key']);
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM ledger'), 0, 'the user\'s own table stays');
    assert.match((await ok('place-order')).stdout, /^placed order 1 /m);
  });
});

describe('outbox replay on PostgreSQL', () => {
  it('sets a range of PUBLISHED rows (ids or times) back to PENDING after waiting for every relay batch in flight; the relay pushes them again and the consumer skips them', async () => {
    await o.init();
    await o.pg.place(3);
    await o.relay();
    await o.consume();
    const dry = await ok('replay', '--from', '2', '--dry-run');
    assert.match(dry.stdout, /^replay would set 2 PUBLISHED row\(s\) \(ids 2-3\) back to PENDING$/m);
    assert.match(dry.stdout, /^  id 2  order:2 seq 1  OrderPlaced  created /m);
    assert.match(dry.stdout, /^dry run: nothing changed$/m);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 0);

    // A relay batch between claim and commit holds the replay lock shared: replay waits for it.
    const { REPLAY_LOCK } = await import('../shared/outbox/postgres/locks.js');
    const batch = await db.pool(1).connect();
    await batch.query('BEGIN');
    await batch.query('SELECT pg_advisory_xact_lock_shared($1)', [REPLAY_LOCK]);
    const replaying = pgCli(['replay', '--from', '2', '--to', '3']);
    await waitFor(async () => (await db.scalar<number>("SELECT COUNT(*)::int FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")) === 1, { timeoutMs: 10_000 });
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 0, 'replay waited for the batch in flight');
    await batch.query('COMMIT');
    batch.release();
    const replayed = await replaying;
    assert.equal(replayed.code, 0, replayed.stdout + replayed.stderr);
    assert.match(replayed.stdout, /^2 row\(s\) set back to PENDING; the relay/m);
    assert.deepEqual(await rows("SELECT id::int FROM outbox WHERE status = 'PENDING' AND published_at IS NULL ORDER BY id"), [{ id: 2 }, { id: 3 }]);

    // By time: every row created from then on.
    const from = new Date(Number(await db.scalar('SELECT MIN(created_at) FROM outbox'))).toISOString();
    assert.match((await ok('replay', '--from', from, '--dry-run')).stdout, /^replay would set 1 PUBLISHED row\(s\) \(id 1\) back to PENDING$/m);
    assert.match((await ok('relay')).stdout, /^relayed 2 events in 1 batch/m);
    await o.consume();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-1': '3' }, 'applied once');
    assert.match(await o.verify('0s'), /^events applied more than once +0 +0 +ok$[\s\S]*^VERIFY OK$/m);
    refused(await pgCli(['replay', '--from', 'yesterday']), 2, /^outbox: --from must be an outbox row id or a time like/);
  });
});

describe('outbox verify on PostgreSQL', () => {
  it('names an event lost from the queue (exit 1) and its order, with the lab\'s checks; --repair republishes it, and rebuilds a Redis that lost its state, which status and verify say is rebuilt from PostgreSQL', async () => {
    await o.init();
    await o.pg.place(2);
    await o.relay();
    await o.consume();
    await o.pg.changeQty(2, 3);
    await o.relay();
    const lost = JSON.parse((await h.client.lpop('outbox.events'))!).event_id as string;
    const result = await pgCli(['verify', '--settle', '200ms']);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, new RegExp(`^events lost \\(never applied, not in Redis\\) +0 +1 +FAIL\n  e\\.g\\. ${lost}$`, 'm'));
    assert.match(result.stdout, /^aggregates whose applied seq != last seq +0 +1 +FAIL\n  e\.g\. order:2$/m);
    assert.match(result.stdout, /^SKUs whose reserved qty != live orders +0 +1 +FAIL\n  e\.g\. SKU-1: reserved 2, orders say 4$/m);
    assert.match(result.stdout, /^VERIFY FAILED: 4 invariants broken$/m);
    const dry = await pgCli(['verify', '--repair', '--dry-run', '--settle', '0s']);
    assert.equal(dry.code, 1, dry.stdout + dry.stderr);
    assert.match(dry.stdout, /^verify --repair would republish 1 lost event\(s\): set their rows back to PENDING and relay every PENDING row$/m);
    assert.match(dry.stdout, /^dry run: nothing changed$/m);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 0);
    const repaired = await pgCli(['verify', '--repair', '--settle', '0s']);
    assert.match(repaired.stdout, /^repair: republished 1 lost event\(s\) to outbox\.events/m);
    await o.consume();
    await o.verify();
    // Redis that lost its state: --repair rebuilds it from PostgreSQL.
    await h.client.flushall();
    assert.match((await ok('status')).stdout, /^store +[0-9a-f]{16}: WARN Redis lost its state \(no outbox:meta\): the relay rebuilds it from PostgreSQL on its next pass$/m);
    const lostState = await pgCli(['verify', '--settle', '0s']);
    assert.equal(lostState.code, 1, lostState.stdout + lostState.stderr);
    assert.match(lostState.stdout, /^Redis serves this store +yes +no: Redis lost its state +FAIL\n  e\.g\. the relay rebuilds it from PostgreSQL on its next pass; by hand: outbox verify --repair$/m);
    assert.doesNotMatch(lostState.stdout + (await ok('status')).stdout, /SQLite/);
    const rebuilt = await pgCli(['verify', '--repair', '--settle', '0s']);
    assert.match(rebuilt.stdout, /^repair: Redis lost its state: rebuilding it from PostgreSQL, 3 published event\(s\) set back to PENDING to be applied again$/m);
    await o.consume();
    assert.match((await ok('status')).stdout, /^store +[0-9a-f]{16}: Redis serves it; rebuilt from PostgreSQL 1 time\(s\), last /m);
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-1': '4' });
  });

  /**
   * The lab on PostgreSQL up to a dump cut under an open transaction: order 1 (SKU-A x2) placed,
   * relayed and applied; its change to qty 5 (outbox row 2, order:1 seq 2) held open while order 2
   * (SKU-B x1, row 3) is placed, relayed and applied and `meanwhile` runs; then a pg_dump, then the
   * change commits. Resolves the dump's path.
   */
  async function dumpCutUnderOpenTransaction(meanwhile: () => Promise<void> = async () => {}): Promise<string> {
    await o.init();
    await ok('place-order', '--sku', 'SKU-A', '--qty', '2');
    await o.relay();
    await o.consume();
    const pool = db.pool(2);
    const outbox = await createPgOutbox(pool, { events: orderEvents });
    const dump = join(h.env.dir, 'store.dump');
    const late = await pool.connect();
    try {
      await late.query('BEGIN');
      await late.query('UPDATE orders SET qty = 5 WHERE id = 1');
      await outbox.append(late, { aggregateType: 'order', aggregateId: 1, type: 'OrderQtyChanged', payload: { orderId: 1, sku: 'SKU-A', qty: 5, previousQty: 2 } });
      await ok('place-order', '--sku', 'SKU-B', '--qty', '1');
      await o.relay();
      await o.consume();
      await meanwhile();
      execFileSync('pg_dump', ['--format=custom', `--file=${dump}`, `--dbname=${db.url}`]);
      await late.query('COMMIT');
    } finally {
      late.release();
    }
    return dump;
  }

  const restore = (dump: string) => execFileSync('pg_restore', ['--clean', '--if-exists', `--dbname=${db.url}`, dump]);

  it('a dump cut while a lower row\'s transaction was open, that row pushed after higher ones, restored: the relay refuses on the latest push\'s row (exit 5) and pushes nothing', async () => {
    // The dump holds rows 1 and 3; row 2 is pushed and applied after it.
    const dump = await dumpCutUnderOpenTransaction();
    await o.relay();
    assert.match((await ok('consume')).stdout, /applied 1,/);
    restore(dump);
    // order:1 seq 2 again, another event: pushed, it would be skipped as the lost one's duplicate.
    await o.pg.changeQty(1, 7);
    const queued = await h.client.lrange('outbox.events', 0, -1);
    refused(await pgCli(['relay']), 5, /^outbox: PostgreSQL database \S+ is behind Redis at \S+: Redis was pushed outbox row 2 as event \S+, and PostgreSQL database \S+ no longer holds it .*outbox verify --repair/);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), queued, 'nothing pushed');
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 1);
  });

  it('the same cut where a later push carried rows the dump holds: the relay\'s check passes and the consumer skips the new event at the lost seq; verify names it as the store behind Redis, --repair rebuilds Redis and the inventory is the live orders\'', async () => {
    // Row 4 committed, not relayed: the dump holds rows 1, 3 and 4 (PENDING).
    const dump = await dumpCutUnderOpenTransaction(() => ok('place-order', '--sku', 'SKU-C', '--qty', '1').then(() => {}));
    // Rows 2 and 4 in one push: its last row, 4, is one the dump holds.
    assert.match((await ok('relay')).stdout, /^relayed 2 events in 1 batch/m);
    assert.match((await ok('consume')).stdout, /applied 2,/);
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '5', 'SKU-B': '1', 'SKU-C': '1' });
    restore(dump);
    assert.deepEqual(await rows('SELECT id::int, aggregate_id, seq::int FROM outbox ORDER BY id'), [
      { id: 1, aggregate_id: 'order:1', seq: 1 },
      { id: 3, aggregate_id: 'order:2', seq: 1 },
      { id: 4, aggregate_id: 'order:3', seq: 1 },
    ]);
    // Before the store writes order 1's next event: Redis applied order:1 past the store's last seq.
    const restored = await pgCli(['verify', '--settle', '0s']);
    assert.equal(restored.code, 1, restored.stdout + restored.stderr);
    assert.match(restored.stdout, /^the store is not behind Redis +yes +no +FAIL\n  e\.g\. order:1: Redis applied it through seq 2, the store holds it through seq 1 /m);
    refused(await pgCli(['prune', '--older-than', '0s', '--dry-run']), 5, /^outbox: PostgreSQL database \S+ is behind Redis at \S+: Redis applied order:1 through seq 2, and PostgreSQL database \S+ holds it through seq 1 .*nothing is pushed or pruned/);

    // order:1 seq 2 again, another event: the rows the meta hash records (4, the highest and the latest push's) are there.
    await o.pg.changeQty(1, 7);
    await o.relay();
    assert.match((await ok('consume')).stdout, /applied 0, duplicates skipped 2,/);
    // The consumer recorded the event it found at a taken seq: status and the relay see the store behind now.
    assert.match((await ok('status')).stdout, /^store +\S+: WARN the store is behind Redis: Redis applied another event at order:1 seq 2, and the PostgreSQL store holds \S+ there /m);
    refused(await pgCli(['relay']), 5, /^outbox: PostgreSQL database \S+ is behind Redis at \S+: Redis applied another event at order:1 seq 2, and PostgreSQL database \S+ holds \S+ there /);
    const found = await pgCli(['verify', '--settle', '0s']);
    assert.equal(found.code, 1, found.stdout + found.stderr);
    assert.doesNotMatch(found.stdout, /^in flight at the snapshot/m, 'an event the consumer will skip is not waited for');
    assert.match(found.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    assert.match(found.stdout, /^the store is not behind Redis +yes +no +FAIL\n  e\.g\. .*order:1 seq 2: Redis applied another event at that seq, which the store no longer holds, so \S+ would be skipped as its duplicate .*outbox verify --repair/m);
    const pruneRefused = await pgCli(['prune', '--older-than', '0s', '--yes']);
    refused(pruneRefused, 5, /^outbox: PostgreSQL database \S+ is behind Redis at \S+: Redis applied another event at order:1 seq 2, and PostgreSQL database \S+ holds \S+ there /);
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 4, 'prune deleted nothing');
    const repaired = await pgCli(['verify', '--repair', '--yes', '--settle', '0s']);
    assert.match(repaired.stdout, /^repair: deleted \d+ Redis key\(s\) of this project$/m);
    assert.match(repaired.stdout, /^repair: Redis lost its state: rebuilding it from PostgreSQL, 4 published event\(s\) set back to PENDING to be applied again$/m);
    assert.match((await ok('consume')).stdout, /applied 4, duplicates skipped 0,/);
    await o.verify();
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '7', 'SKU-B': '1', 'SKU-C': '1' });
  });

  it('--checks runs a check set on PostgreSQL: its snapshot.postgres reads in verify\'s REPEATABLE READ snapshot, its checks get store "postgres" and the pool; a FAIL row is exit 1; a set that reads only app.db is refused (exit 2)', async () => {
    await o.init();
    await o.pg.place(3);
    await o.relay();
    await o.consume();
    const checks = join(h.env.dir, 'pg-checks.mjs');
    writeFileSync(
      checks,
      `export default { name: 'mine',
        snapshot: { postgres: async (client) => (await client.query("SELECT COUNT(*)::int AS n, current_setting('transaction_isolation') AS iso FROM orders")).rows[0] },
        checks: {
          'orders in the snapshot': ({ snapshot }) => ({ name: 'orders in the snapshot', expected: '3', actual: String(snapshot.n), status: snapshot.n === 3 ? 'ok' : 'FAIL' }),
          'store': async ({ store, producer, snapshot }) => ({ name: 'store / isolation / orders by its pool', expected: '-', status: 'info',
            actual: store + ' / ' + snapshot.iso + ' / ' + (await producer.query('SELECT COUNT(*)::int AS n FROM orders')).rows[0].n }),
          'more orders': ({ snapshot }) => ({ name: 'orders > 3', expected: 'yes', actual: snapshot.n > 3 ? 'yes' : 'no', status: snapshot.n > 3 ? 'ok' : 'FAIL' }),
        } };`,
    );
    const result = await pgCli(['verify', '--checks', checks, '--settle', '0s']);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /^orders in the snapshot +3 +3 +ok$/m);
    assert.match(result.stdout, /^store \/ isolation \/ orders by its pool +- +postgres \/ repeatable read \/ 3 +info$/m);
    assert.match(result.stdout, /^orders > 3 +yes +no +FAIL$/m);
    assert.match(result.stdout, /^events lost \(never applied, not in Redis\) +0 +0 +ok$/m);
    assert.doesNotMatch(result.stdout, /SKUs whose reserved qty/, '--checks replaces the lab\'s set');
    assert.match(result.stdout, /^VERIFY FAILED: 1 invariant broken$/m);

    const sqliteOnly = join(h.env.dir, 'sqlite-checks.mjs');
    writeFileSync(sqliteOnly, "export default { name: 'mine', snapshot: { producer: (db) => db.prepare('SELECT 1').get() }, checks: { 'x': () => [] } };");
    refused(
      await pgCli(['verify', '--checks', sqliteOnly]),
      2,
      /^outbox: --checks .*sqlite-checks\.mjs: mine reads app\.db in its snapshot \(snapshot\.producer\) and has no snapshot\.postgres for PostgreSQL: add one to verify this store$/,
    );
    // A snapshot.postgres that throws fails its one row, named after it.
    const badRead = join(h.env.dir, 'bad-checks.mjs');
    writeFileSync(badRead, "export default { name: 'mine', snapshot: { postgres: (client) => client.query('SELECT * FROM nowhere') }, checks: { 'uses it': () => [] } };");
    const bad = await pgCli(['verify', '--checks', badRead, '--settle', '0s']);
    assert.equal(bad.code, 1, bad.stdout + bad.stderr);
    assert.match(bad.stderr, /^verify: check "mine: snapshot\.postgres" of mine threw: relation "nowhere" does not exist$/m);
  });
});

describe('outbox on PostgreSQL: bad settings and unusable stores', () => {
  it('a bad --database / OUTBOX_DATABASE_URL is refused in one line, exit 2, before any store is opened', async () => {
    for (const [env, args, pattern] of [
      [{ OUTBOX_DATABASE_URL: 'foo' }, ['status'], /^outbox: OUTBOX_DATABASE_URL must be a URL like postgres:\/\/user@127\.0\.0\.1:5432\/outbox \(or empty for app\.db in the data dir\), got "foo"$/],
      [{}, ['--database', 'mysql://root:secret@db/x', 'relay'], /^outbox: --database must start with postgres:\/\/ or postgresql:\/\/ \(or be empty for app\.db in the data dir\), got "mysql:\/\/root:\*\*\*@db\/x"$/],
      [{}, ['place-order', '--database', 'postgres:///x'], /^outbox: --database names no host: write it like postgres:\/\/user@127\.0\.0\.1:5432\/outbox, got "postgres:\/\/\/x"$/],
    ] as const) {
      const result = await pgCli([...args], env);
      refused(result, 2, pattern);
      assert.doesNotMatch(result.stderr, /secret/);
    }
    assert.deepEqual(await h.client.keys('*'), [], 'Redis untouched');
  });

  it('the command not on PostgreSQL yet (bench) is refused in one line (exit 2) instead of running on app.db; chaos there takes its own faults only', async () => {
    refused(await pgCli(['bench', '--quick']), 2, /^outbox: bench does not run on the PostgreSQL store yet \(--database \/ OUTBOX_DATABASE_URL is set\): unset it to run it on app\.db$/);
    // Chaos runs on PostgreSQL (test/scale-out-chaos.test.ts), with the faults of that path only.
    refused(await pgCli(['chaos', '--targets', 'redis-wipe']), 2, /^outbox: --targets on PostgreSQL takes a comma-separated list of relay, consumer, cluster-node, cluster-node-wipe, got "redis-wipe"$/);
    assert.deepEqual(await h.client.keys('*'), []);
  });

  it('an unreachable server is one line, exit 5, password hidden; a database without the outbox tables or without orders is exit 5 naming "outbox init"', async () => {
    const unreachable = await pgCli(['relay'], { OUTBOX_DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/none' });
    refused(unreachable, 5, /^outbox: cannot connect to PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/none \(connect ECONNREFUSED 127\.0\.0\.1:1\): start it, or point --database \/ OUTBOX_DATABASE_URL at a running server$/);
    for (const command of [['place-order'], ['relay'], ['report'], ['status']]) {
      refused(await pgCli(command), 5, new RegExp(`^outbox: PostgreSQL database ${db.name} has no outbox tables: run "outbox init" with the same --database / OUTBOX_DATABASE_URL first$`));
    }
    // A service's database: the outbox tables, no orders.
    const { createPgOutbox } = await import('../shared/outbox/index.js');
    const { orderEvents } = await import('../shared/lab/orders/order-events.js');
    await createPgOutbox(db.pool(1), { events: orderEvents });
    refused(await pgCli(['place-order']), 5, new RegExp(`^outbox: PostgreSQL database ${db.name} has no orders table \\(the lab's\\): run "outbox init"`));
    await o.relay();
  });

  it('a Redis that serves another store is refused (exit 5) by relay and report, and the rows stay PENDING', async () => {
    await o.init();
    await o.pg.place(1);
    await h.client.hset('outbox:meta', 'store', 'ffffffffffffffff');
    refused(await pgCli(['relay']), 5, /serves.*ffffffffffffffff|ffffffffffffffff/);
    refused(await pgCli(['report']), 5, /ffffffffffffffff/);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 1);
    assert.equal(await h.client.llen('outbox.events'), 0);
  });
});
