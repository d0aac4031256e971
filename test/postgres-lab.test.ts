import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, it } from 'node:test';
import { useHarness } from './helpers/harness.js';
import { pgCliEnv, pgCommands, usePostgres } from './helpers/postgres.js';
import { orders } from './helpers/orders.js';
import { createLogger } from '../shared/outbox/logger.js';
import { attachPgApp } from '../shared/runtime/pg-attached-apps.js';
import { pgLabStore } from '../shared/lab/lab-store.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

// `outbox lab` and `outbox dualwrite` on the PostgreSQL store, in this file's own database.
const db = usePostgres();
const h = useHarness({ init: false });

beforeEach(async () => {
  await db.reset();
  await db.scalar('DROP TABLE IF EXISTS orders, dualwrite_orders');
});

const { pgCli, ok, refused } = pgCommands(db, h);
/** The steps before a test's subject, in this process (helpers/orders.ts). */
const o = orders(() => pgCliEnv(db, h));
const artifact = (name: string) => readFileSync(join(h.env.dir, name), 'utf8');
const count = async (table: string) => Number(await db.scalar(`SELECT COUNT(*) FROM ${table}`));


describe('outbox lab on PostgreSQL', () => {
  it('runs steps 1-8 on the PostgreSQL store and leaves every artifact in the seed\'s format; its relay-crash child dies after the push; verify holds; a second run starts over', async () => {
    // What an earlier run left: the lab starts over as `init --force` does.
    await o.init();
    await o.pg.place(2);
    await h.client.rpush('outbox.events', 'left over from an earlier run');

    const result = await ok('lab');
    assert.match(result.stdout, new RegExp(`^outbox lab in ${h.env.dir}, the store in PostgreSQL database ${db.name}$`, 'm'));
    assert.match(result.stdout, new RegExp(`^   created the orders and outbox tables in PostgreSQL database ${db.name}; deleted \\d+ Redis keys$`, 'm'));
    for (const step of ['1. init', '2. dualwrite', '3. place-order', '4. relay', '5. order-check', '6. relay-crash', '7. consume', '8. report', 'verify']) {
      assert.ok(result.stdout.includes(`== ${step}`), step);
    }
    assert.match(result.stdout, /^   first run relayed 5, LLEN outbox\.events = 5\n   second run relayed 0, LLEN outbox\.events = 5$/m);
    // The child relay died at relay.after-push, on this database: its row stayed PENDING and was pushed again.
    assert.match(result.stderr, /^crash point relay\.after-push: pushed rows 6-6, dying before marking them PUBLISHED$/m);
    assert.match(result.stdout, /^   relay after the crash pushed 1 event\(s\) again$/m);
    assert.match(result.stdout, /^lab done: nothing lost, duplicates absorbed, order kept$/m);
    assert.equal(existsSync(join(h.env.dir, 'app.db')), false, 'app.db is not made');

    const [first, failure] = artifact('dualwrite.out').split('\n');
    assert.equal(first, 'INCONSISTENT orders=3 published=2');
    assert.match(failure, /^order 3 was saved, then publishing its event failed: /);
    assert.equal(await count('dualwrite_orders'), 3);
    assert.equal(artifact('order_check.out'), 'ORDER OK\n');
    const crashedEvent = await db.scalar<string>("SELECT event_id FROM outbox WHERE aggregate_id = 'order:4'");
    assert.equal(artifact('atleastonce.out'), `DUPLICATE event_id=${crashedEvent} count=2\n`);

    const report = artifact('report.txt');
    assert.equal(report, 'orders=4\noutbox=6\nenqueued=7\nprocessed_unique=6\n');
    assert.equal(await count('orders'), 4);
    assert.equal(await count('outbox'), 6);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 0);
    assert.equal(Number(await h.client.get('outbox:enqueued')), 7);
    assert.equal(await h.client.hlen('processed'), 6);
    assert.deepEqual(await h.client.hgetall('inventory:reserved'), { 'SKU-A': '8', 'SKU-B': '0', 'SKU-C': '4' });
    assert.match(result.stdout, /^   VERIFY OK$/m);
    await o.verify();

    const again = await ok('lab');
    assert.match(again.stdout, /^lab done/m);
    assert.equal(artifact('report.txt'), report);
    assert.equal(await count('dualwrite_orders'), 3);
  });

  it('after relay-crash it waits until no session holds a PENDING row (a killed relay\'s batch stays locked until PostgreSQL ends its session), then relays again', async () => {
    await o.init();
    await o.pg.place(1);
    // A relay's claim that PostgreSQL has not rolled back yet: the lab's relay would skip its rows (SKIP LOCKED).
    const holder = await db.pool(1).connect();
    await holder.query('BEGIN');
    await holder.query("SELECT id FROM outbox WHERE status = 'PENDING' FOR UPDATE");
    let gone = false;
    const waiting = pgLabStore(db.pool(1)).crashedRelayGone().then(() => (gone = true));
    await waitFor(async () => Number(await db.scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")) === 1, {
      message: 'the lab did not wait for the row lock',
    });
    assert.equal(gone, false);
    await holder.query('ROLLBACK');
    holder.release();
    await waiting;
    assert.equal(gone, true);
  });

  it('refuses (exit 4, one line) while an app has the PostgreSQL store open, tables untouched; runs with --ignore-attached', async () => {
    await o.init();
    await o.pg.place(1);
    const detach = await attachPgApp(db.url, 'outbox-relay', createLogger('test', () => {}));
    try {
      refused(await pgCli(['lab']), 4, new RegExp(`^outbox: outbox-relay .* has PostgreSQL database ${db.name} open: stop them first: .*, or pass --ignore-attached$`));
      assert.equal(await count('orders'), 1);
      assert.equal(await count('outbox'), 1);
      assert.match((await ok('lab', '--ignore-attached')).stdout, /^lab done/m);
    } finally {
      await detach();
    }
  });

  it('with Redis unreachable it is one line, exit 5, and the PostgreSQL tables are left as they were; an unreachable server is one line, exit 5', async () => {
    await o.init();
    await o.pg.place(1);
    refused(await pgCli(['lab'], { REDIS_URL: 'redis://127.0.0.1:1' }), 5, /^outbox: .*127\.0\.0\.1:1/);
    assert.equal(await count('orders'), 1);
    assert.equal(await count('outbox'), 1);
    refused(await pgCli(['lab'], { OUTBOX_DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/none' }), 5, /^outbox: cannot connect to PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/none /);
  });
});

describe('outbox dualwrite on PostgreSQL', () => {
  it('saves into its own table dualwrite_orders, then the publish fails: INCONSISTENT from the real stores; the orders and outbox tables and outbox.events untouched', async () => {
    await o.init();
    const result = await ok('dualwrite', '--count', '4');
    assert.match(artifact('dualwrite.out'), /^INCONSISTENT orders=4 published=3\norder 4 was saved, then publishing its event failed: /);
    assert.match(result.stdout, /^INCONSISTENT orders=4 published=3$/m);
    assert.match(result.stdout, new RegExp(`; scratch table dualwrite_orders in PostgreSQL database ${db.name}, the orders and outbox tables untouched\\)$`, 'm'));
    assert.deepEqual((await db.pool(1).query('SELECT id::int, sku FROM dualwrite_orders ORDER BY id')).rows.map((row) => `${row.id}:${row.sku}`), ['1:SKU-1', '2:SKU-2', '3:SKU-3', '4:SKU-4']);
    assert.equal(await h.client.llen('outbox.dualwrite.events'), 3);
    assert.equal(await count('orders'), 0);
    assert.equal(await count('outbox'), 0);
    assert.equal(await h.client.llen('outbox.events'), 0);
    assert.equal(existsSync(join(h.env.dir, 'dualwrite.db')), false, 'no SQLite scratch store');

    // A second run starts from an empty table and list.
    await ok('dualwrite', '--count', '2');
    assert.equal(artifact('dualwrite.out').split('\n')[0], 'INCONSISTENT orders=2 published=1');
    assert.equal(await count('dualwrite_orders'), 2);
  });
});
