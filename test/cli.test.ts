import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { runCli, type CliEnv } from './helpers/cli.js';
import { RedisServer, testClient } from './helpers/redis-server.js';
import { count, tempDir } from './helpers/stores.js';

const COMMANDS = [
  'init', 'dualwrite', 'place-order', 'change-qty', 'cancel-order', 'relay', 'order-check',
  'relay-crash', 'dup-check', 'consume', 'report', 'verify', 'lab',
];

let redis: RedisServer;
let client: Redis;
let env: CliEnv;

before(async () => {
  redis = await RedisServer.start();
  client = testClient(redis.url);
});
after(async () => {
  client.disconnect();
  await redis.destroy();
});
beforeEach(async () => {
  env = { dir: tempDir().dir, redisUrl: redis.url };
  await client.flushall();
});

async function cli(...args: string[]) {
  const result = await runCli(args, env);
  assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
  return result;
}

const artifact = (name: string) => readFileSync(join(env.dir, name), 'utf8');

describe('help', () => {
  it('outbox --help lists every command with a description', async () => {
    const { stdout } = await cli('--help');
    for (const name of COMMANDS) assert.match(stdout, new RegExp(`^  outbox ${name} +\\S.*$`, 'm'), name);
    assert.match(stdout, /--dir .*OUTBOX_DIR/);
    assert.match(stdout, /--redis .*REDIS_URL/);
  });

  it('every command has --help', async () => {
    for (const name of COMMANDS) {
      const { stdout } = await cli(name, '--help');
      assert.match(stdout, new RegExp(`^outbox ${name}`), name);
      assert.match(stdout, /--dir/);
    }
  });
});

describe('outbox lab', () => {
  it('runs steps 1-8 on a clean state and leaves every artifact in the seed\'s format', async () => {
    await client.rpush('outbox.events', 'left over from an earlier run');
    const result = await cli('lab');
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
    assert.equal(Number(values.orders), count(env.dir, 'SELECT COUNT(*) FROM orders'));
    assert.equal(Number(values.outbox), count(env.dir, 'SELECT COUNT(*) FROM outbox'));
    assert.equal(Number(values.enqueued), Number(await client.get('outbox:enqueued')));
    assert.equal(Number(values.processed_unique), await client.hlen('processed'));
    assert.ok(Number(values.enqueued) > Number(values.processed_unique));
    assert.equal(Number(values.processed_unique), Number(values.outbox));
    assert.match(result.stdout, /VERIFY OK/);

    await cli('lab');
    assert.equal(artifact('report.txt'), report);
  });
});

describe('outbox dualwrite', () => {
  it('records INCONSISTENT from the real stores and leaves app.db alone', async () => {
    await cli('init');
    const result = await cli('dualwrite', '--count', '4');
    assert.match(artifact('dualwrite.out'), /^INCONSISTENT orders=4 published=3\norder 4 was saved, then publishing its event failed: /);
    assert.match(result.stdout, /^INCONSISTENT orders=4 published=3$/m);
    assert.equal(await client.llen('outbox.dualwrite.events'), 3);
    assert.equal(count(env.dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.equal(await client.llen('outbox.events'), 0);

    for (let i = 0; i < 3; i += 1) await cli('place-order');
    assert.equal(count(env.dir, 'SELECT COUNT(*) FROM orders'), 3);
    assert.equal(count(env.dir, 'SELECT COUNT(*) FROM outbox'), 3);
  });
});

describe('outbox report and verify', () => {
  beforeEach(async () => {
    await cli('init');
    await cli('place-order', '--sku', 'SKU-A', '--qty', '2', '--count', '3');
    await cli('change-qty', '--id', '1', '--qty', '4');
    await cli('relay');
  });

  it('report writes exactly four lines counted from the stores', async () => {
    await cli('report');
    assert.equal(artifact('report.txt'), 'orders=3\noutbox=4\nenqueued=4\nprocessed_unique=0\n');
    await cli('consume');
    await cli('report');
    assert.equal(artifact('report.txt'), 'orders=3\noutbox=4\nenqueued=4\nprocessed_unique=4\n');
  });

  it('verify passes when every event was applied once and fails, naming it, when one is lost', async () => {
    await cli('consume');
    assert.match((await cli('verify')).stdout, /VERIFY OK/);

    const [lost] = await client.hkeys('processed');
    await client.hdel('processed', lost);
    const result = await runCli(['verify'], env);
    assert.equal(result.code, 1);
    assert.match(result.stdout, /outbox events never applied \(lost\) +0 +1 +FAIL\n +e\.g\. /);
    assert.ok(result.stdout.includes(lost));
    assert.match(result.stdout, /processed_unique = outbox rows +4 +3 +FAIL/);
    assert.match(result.stderr, /^outbox: 2 invariant\(s\) failed$/m);
  });

  it('verify fails on PENDING rows, a wrong reservation and a stuck parked event', async () => {
    await cli('consume');
    await cli('place-order', '--sku', 'SKU-B');
    await client.hincrby('inventory:reserved', 'SKU-A', 1);
    await client.hset('outbox.events:parked', '3:5', JSON.stringify({ reason: 'gap', message: '{}' }));
    const result = await runCli(['verify'], env);
    assert.equal(result.code, 1);
    assert.match(result.stdout, /PENDING outbox rows +0 +1 +FAIL/);
    assert.match(result.stdout, /SKUs whose reserved qty != live orders +0 +2 +FAIL\n +e\.g\. SKU-A: reserved 9, orders say 8, SKU-B: reserved 0, orders say 1\n/);
    assert.match(result.stdout, /parked events \(waiting for a gap\) +0 +1 +FAIL/);
    assert.match(result.stdout, /aggregates whose applied seq != last seq +0 +1 +FAIL/);
  });
});
