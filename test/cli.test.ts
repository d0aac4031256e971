import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { createDatabase } from '../shared/lab/init-stores.js';
import { count } from './helpers/stores.js';

const COMMANDS = [
  'init', 'dualwrite', 'place-order', 'change-qty', 'cancel-order', 'relay', 'order-check',
  'relay-crash', 'dup-check', 'consume', 'report', 'verify', 'lab',
];

const h = useHarness({ init: false });

const artifact = (name: string) => readFileSync(join(h.env.dir, name), 'utf8');

describe('help', () => {
  it('outbox --help lists every command with a description', async () => {
    const { stdout } = await h.cli('--help');
    for (const name of COMMANDS) assert.match(stdout, new RegExp(`^  outbox ${name} +\\S.*$`, 'm'), name);
    assert.match(stdout, /--dir .*OUTBOX_DIR/);
    assert.match(stdout, /--redis .*REDIS_URL/);
  });

  it('every command has --help', async () => {
    for (const name of COMMANDS) {
      const { stdout } = await h.cli(name, '--help');
      assert.match(stdout, new RegExp(`^outbox ${name}`), name);
      assert.match(stdout, /--dir/);
    }
  });

  it('--help and a rejected argument load none of ioredis, better-sqlite3, bullmq, piscina, pm2 (fast start-up)', async () => {
    // `outbox --help` loads every command module, so it covers what each of them imports at top level.
    const forbid = fileURLToPath(new URL('./fixtures/forbid-heavy-modules.js', import.meta.url));
    const cli = (...args: string[]) => runCli(args, { ...h.env, env: { NODE_OPTIONS: `--import=${forbid}` } });
    const help = await cli('--help');
    assert.equal(help.code, 0, help.stderr);
    const bad = await cli('place-order', '--qty', 'lots');
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /^outbox: --qty must be/);
    // The guard works: a command that opens the stores trips it.
    const report = await cli('report');
    assert.notEqual(report.code, 0);
    assert.match(report.stderr, /forbidden module loaded: (ioredis|better-sqlite3)/);
  });

  it('verify loads no zod: the lab\'s checks need none of the event declarations (zod is about 50 ms of a start-up)', async () => {
    const forbid = fileURLToPath(new URL('./fixtures/forbid-heavy-modules.js', import.meta.url));
    const cli = (...args: string[]) => runCli(args, { ...h.env, env: { NODE_OPTIONS: `--import=${forbid}`, OUTBOX_TEST_FORBIDDEN: 'zod' } });
    createDatabase(h.env.dir);
    const verify = await cli('verify');
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /VERIFY OK/);
    // The guard works: place-order checks its payload with zod.
    const placed = await cli('place-order');
    assert.notEqual(placed.code, 0);
    assert.match(placed.stderr, /forbidden module loaded: zod/);
  });
});

describe('outbox lab', () => {
  it('runs steps 1-8 on a clean state and leaves every artifact in the seed\'s format', async () => {
    await h.client.rpush('outbox.events', 'left over from an earlier run');
    const result = await h.cli('lab');
    for (const step of ['1. init', '2. dualwrite', '3. place-order', '4. relay', '5. order-check', '6. relay-crash', '7. consume', '8. report']) {
      assert.ok(result.stdout.includes(`== ${step}`), step);
    }
    const [first] = artifact('dualwrite.out').split('\n');
    const [, orders, published] = /^INCONSISTENT orders=(\d+) published=(\d+)$/.exec(first)!;
    assert.notEqual(orders, published);
    assert.equal(artifact('order_check.out'), 'ORDER OK\n');
    assert.match(artifact('atleastonce.out'), /^DUPLICATE event_id=[0-9a-f-]{36} count=2\n$/);

    const report = artifact('report.txt');
    const values = Object.fromEntries(report.trimEnd().split('\n').map((line) => line.split('=')));
    assert.deepEqual(Object.keys(values), ['orders', 'outbox', 'enqueued', 'processed_unique']);
    assert.equal(report.split('\n').length, 5);
    assert.equal(Number(values.orders), count(h.env.dir, 'SELECT COUNT(*) FROM orders'));
    assert.equal(Number(values.outbox), count(h.env.dir, 'SELECT COUNT(*) FROM outbox'));
    assert.equal(Number(values.enqueued), Number(await h.client.get('outbox:enqueued')));
    assert.equal(Number(values.processed_unique), await h.client.hlen('processed'));
    assert.ok(Number(values.enqueued) > Number(values.processed_unique));
    assert.equal(Number(values.processed_unique), Number(values.outbox));
    assert.match(result.stdout, /VERIFY OK/);

    await h.cli('lab');
    assert.equal(artifact('report.txt'), report);
  });
});

describe('outbox dualwrite', () => {
  it('records INCONSISTENT from the real stores and leaves app.db alone', async () => {
    await h.cli('init');
    const result = await h.cli('dualwrite', '--count', '4');
    assert.match(artifact('dualwrite.out'), /^INCONSISTENT orders=4 published=3\norder 4 was saved, then publishing its event failed: /);
    assert.match(result.stdout, /^INCONSISTENT orders=4 published=3$/m);
    assert.equal(await h.client.llen('outbox.dualwrite.events'), 3);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.equal(await h.client.llen('outbox.events'), 0);

    for (let i = 0; i < 3; i += 1) await h.cli('place-order');
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM orders'), 3);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox'), 3);
  });
});

describe('outbox report and verify', () => {
  beforeEach(async () => {
    await h.cli('init');
    await h.cli('place-order', '--sku', 'SKU-A', '--qty', '2', '--count', '3');
    await h.cli('change-qty', '--id', '1', '--qty', '4');
    await h.cli('relay');
  });

  it('report writes exactly four lines counted from the stores', async () => {
    await h.cli('report');
    assert.equal(artifact('report.txt'), 'orders=3\noutbox=4\nenqueued=4\nprocessed_unique=0\n');
    await h.cli('consume');
    await h.cli('report');
    assert.equal(artifact('report.txt'), 'orders=3\noutbox=4\nenqueued=4\nprocessed_unique=4\n');
  });

  it('verify passes when every event was applied once and fails, naming it, when one is lost', async () => {
    await h.cli('consume');
    assert.match((await h.cli('verify')).stdout, /VERIFY OK/);

    const [lost] = await h.client.hkeys('processed');
    await h.client.hdel('processed', lost);
    // Not applied: in flight as far as the snapshot can tell, so verify waits the window, then names it.
    const result = await runCli(['verify', '--settle', '1s'], h.env);
    assert.equal(result.code, 1);
    assert.match(result.stdout, /in flight at the snapshot \/ applied within 1s +- +1 \/ 0 +info/);
    assert.match(result.stdout, /events lost \(never applied, not in Redis\) +0 +1 +FAIL\n +e\.g\. /);
    assert.ok(result.stdout.includes(lost));
    assert.match(result.stdout, /processed_unique = outbox rows +4 +3 +FAIL/);
    assert.match(result.stderr, /^outbox: 2 invariant\(s\) failed$/m);
  });

  it('verify fails on PENDING rows, a wrong reservation and a stuck parked event', async () => {
    await h.cli('consume');
    await h.cli('place-order', '--sku', 'SKU-B');
    await h.client.hincrby('inventory:reserved', 'SKU-A', 1);
    await h.client.hset('outbox.events:parked', 'order:3:5', JSON.stringify({ reason: 'gap', message: '{}' }));
    // The strict snapshot: the PENDING row is judged at once.
    const result = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(result.code, 1);
    assert.match(result.stdout, /PENDING outbox rows +0 +1 +FAIL/);
    assert.match(result.stdout, /SKUs whose reserved qty != live orders +0 +2 +FAIL\n +e\.g\. SKU-A: reserved 9, orders say 8, SKU-B: reserved 0, orders say 1\n/);
    assert.match(result.stdout, /parked events \(waiting for a gap\) +0 +1 +FAIL/);
    assert.match(result.stdout, /aggregates whose applied seq != last seq +0 +1 +FAIL/);
    assert.match(result.stdout, /in flight at the snapshot \/ applied within 0s +- +1 \/ 0 +info/);
  });

  it('--settle takes a duration with a unit', async () => {
    const result = await runCli(['verify', '--settle', '5'], h.env);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^outbox: --settle must be a duration like 60s, 500ms or 2m, got "5" without a unit/);
  });
});
