import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { defineRedisHandlers } from '../shared/outbox/consumer/handlers.js';
import { orderEvents } from '../shared/lab/orders/order-events.js';
import { runCli, type CliEnv } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { startRedisCluster } from './helpers/redis-cluster.js';
import { testClient } from '../shared/tooling/local/redis-server.js';
import { guardCount, guardsOf } from './helpers/guards.js';
import { guardKeyOf, setGuards } from '../shared/outbox/redis/guards.js';

const h = useHarness();
const o = orders(() => h.env);

const usage = async (key: string) => Number((await h.client.call('MEMORY', 'USAGE', key, 'SAMPLES', '5')) ?? 0);
const usedMemory = async () => Number(/^used_memory:(\d+)/m.exec(await h.client.info('memory'))![1]);

/** Runs `fn` with Redis's maxmemory set to `bytes`, then lifts the limit (the server is shared by the file). */
async function withMaxmemory<T>(bytes: number, fn: () => Promise<T>): Promise<T> {
  await h.client.config('SET', 'maxmemory', String(bytes));
  try {
    return await fn();
  } finally {
    await h.client.config('SET', 'maxmemory', '0');
  }
}

/** `count` orders whose first event's handler fails once (max attempts 1): dead-lettered, each order's seq 2 parked. */
async function blockOrders(count: number): Promise<void> {
  o.place(count);
  for (let id = 1; id <= count; id += 1) o.changeQty(id, 2);
  await o.relay();
  const redis = await connectRedis(h.env.redisUrl);
  try {
    const failing = defineRedisHandlers(orderEvents, {
      OrderPlaced: () => {
        throw new Error('handler down');
      },
      OrderQtyChanged: () => [],
      OrderCancelled: () => [],
    });
    await (await createConsumer({ redis, handlers: failing, maxAttempts: 1 })).drain();
  } finally {
    redis.disconnect();
  }
}

describe('outbox status: memory', () => {
  it('shows used_memory, maxmemory, bytes per event and aggregate, the rate and days until maxmemory', async () => {
    o.place(30);
    for (let id = 1; id <= 10; id += 1) o.changeQty(id, 3);
    await o.relay();
    await o.consume();
    const guards = guardsOf(h.client).then((all) => Object.keys(all));
    const buckets = [...new Set((await guards).map(guardKeyOf))];
    const expectedPerAggregate = (await Promise.all(buckets.map(usage))).reduce((a, b) => a + b, 0) / (await guards).length;
    // Every element counted (SAMPLES 0): status samples 5, an estimate of this.
    const exact = async (key: string) => Number((await h.client.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
    const records =
      (await exact('processed')) + (await exact('outbox:apply-count')) + (await exact('outbox:applied-log'));
    const [id] = (await h.client.call('HRANDFIELD', 'processed', '1')) as string[];
    const expectedPerEvent = records / 40 + (await exact(`outbox:seen:${id}`));

    // 10 MB from the limit: at any rate a CLI run can measure here, less than 7 days away.
    const { text, json } = await withMaxmemory((await usedMemory()) + 10 * 1024 * 1024, async () => ({
      text: (await h.cli('status')).stdout,
      json: JSON.parse((await h.cli('status', '--json')).stdout),
    }));
    assert.match(
      text,
      /^memory {6}used [\d.]+ MB of maxmemory [\d.]+ MB, growing [\d.]+ K?B\/s, [\d.]+ (hours|days) until maxmemory$/m,
    );
    assert.match(text, /^ +[\d.]+ events\/s; per event in the window \d+ B, per aggregate \d+ B \(30 aggregates\)$/m);
    assert.match(text, /^ +rate: the applied counter's rise since the oldest of 200 sampled processed entries \(/m);
    assert.match(text, /^WARN {8}Redis reaches maxmemory in [\d.]+ (hours|days) at this rate \(fewer than 7 days/m);

    const m = json.memory;
    assert.equal(m.aggregates, 30);
    // The buckets of the sampled aggregates (all 30 here): the same bytes, divided and multiplied back.
    assert.ok(Math.abs(m.bytesPerAggregate - expectedPerAggregate) < 1e-6, `${m.bytesPerAggregate} vs ${expectedPerAggregate}`);
    const off = Math.abs(m.bytesPerEvent - expectedPerEvent);
    assert.ok(off < expectedPerEvent * 0.2, `${m.bytesPerEvent} vs ${expectedPerEvent}`);
    assert.ok(m.eventsPerSec > 0, 'a rate from the applied events');
    const [server] = m.servers;
    assert.equal(server.oom, false);
    assert.ok(server.maxmemory - server.usedMemory > 0 && server.maxmemory - server.usedMemory <= 10 * 1024 * 1024);
    const days = (server.maxmemory - server.usedMemory) / server.growthBytesPerSec / 86_400;
    assert.ok(Math.abs(server.daysUntilFull - days) < 1e-9 && days < 7, `${server.daysUntilFull} days`);
    assert.equal(m.daysUntilFull, server.daysUntilFull);
    assert.match(json.alerts[0], /^Redis reaches maxmemory in /);
    assert.equal(json.partitions, undefined);

    // Without a limit: no days, no warning.
    const free = await h.cli('status');
    assert.match(free.stdout, /^memory      used .+ of no maxmemory/m);
    assert.doesNotMatch(free.stdout, /reaches maxmemory/);
  });

  it('says OOM when used_memory is at maxmemory (Redis refuses writes)', async () => {
    o.place(2);
    await o.relay();
    await o.consume();
    const text = await withMaxmemory(1, async () => (await h.cli('status')).stdout);
    assert.match(text, /^memory      used .+ of maxmemory 1 B, .+, AT maxmemory$/m);
    assert.match(text, /^WARN {8}OOM: Redis is at maxmemory \(used_memory .+ of 1 B\): it refuses writes/m);
  });

  it('makes only short Redis calls: no command of status over 5 ms (SLOWLOG) with 200,000 applied events', async () => {
    await blockOrders(3);
    // History as a long run leaves it: many processed entries, apply counts and applied seqs.
    for (let start = 0; start < 200_000; start += 10_000) {
      const fields: string[] = [];
      const seqs: [string, string][] = [];
      for (let i = start; i < start + 10_000; i += 1) {
        const entry = { type: 'OrderPlaced', aggregate: `order:x${i}`, seq: 1, applyOrder: i + 1, appliedAt: 1 };
        fields.push(`old-${i}`, JSON.stringify(entry));
        seqs.push([`order:x${i}`, '1']);
      }
      await h.client.hset('processed', ...fields);
      await setGuards(h.client, seqs);
    }
    await h.client.config('SET', 'slowlog-log-slower-than', '5000');
    try {
      await h.client.slowlog('RESET');
      const json = JSON.parse((await h.cli('status', '--json')).stdout);
      // The CLI's connections are named outbox-cli: the test's own calls (SLOWLOG RESET) are not status's.
      const slow = (await h.client.slowlog('GET', 10)) as [number, number, number, string[], string, string][];
      const ofStatus = slow.filter(([, , , , , name]) => name === 'outbox-cli');
      assert.deepEqual(ofStatus.map(([, , micros, command]) => `${command.slice(0, 2).join(' ')} ${micros} µs`), []);
      assert.equal(json.blocked.length, 3);
      // The 3 blocked orders never applied an event: no guard.
      assert.equal(json.memory.aggregates, 200_000);
    } finally {
      await h.client.config('SET', 'slowlog-log-slower-than', '10000');
    }
  });
});

/** Places, relays and consumes 12 orders with `env`, then resolves `status --json`. */
async function partitionedStatus(env: CliEnv) {
  const p = orders(() => env);
  await p.init();
  p.place(12);
  await p.relay();
  await p.consume();
  const result = await runCli(['status', '--json'], env);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

describe('outbox status: memory per partition', () => {
  it('with 3 partitions on one Redis: one server holding them all, each partition its own figures', async () => {
    // The harness made this Redis serve app.db unpartitioned.
    await h.client.flushall();
    const json = await partitionedStatus({ ...h.env, env: { OUTBOX_PARTITIONS: '3' } });
    assert.equal(json.memory.servers.length, 1);
    assert.deepEqual(json.memory.servers[0].partitions, [0, 1, 2]);
    assert.equal(json.partitions.reduce((n: number, p: { memory: { events: number } }) => n + p.memory.events, 0), 12);
    for (let i = 0; i < 3; i += 1) {
      assert.equal(json.partitions[i].memory.events, await h.client.hlen(`{p${i}}:processed`));
      assert.equal(json.partitions[i].memory.aggregates, await guardCount(h.client, `{p${i}}:`));
    }
    assert.equal(json.memory.aggregates, 12);
  });

  it('on a 3-master Redis Cluster: each partition under the master holding its keys, with its memory', async () => {
    const cluster = await startRedisCluster();
    try {
      const clusterEnv = { OUTBOX_PARTITIONS: '3', OUTBOX_REDIS_CLUSTER: cluster.nodes.join(',') };
      const json = await partitionedStatus({ ...h.env, redisUrl: 'redis://127.0.0.1:1', env: clusterEnv });
      const servers = json.memory.servers as { address: string; partitions: number[]; usedMemory: number }[];
      assert.deepEqual(servers.flatMap((s) => s.partitions).sort(), [0, 1, 2]);
      // {p1} and {p2} hash to the third master's slots, {p0} to the second's.
      assert.equal(servers.length, 2);
      const text = await runCli(['status'], { ...h.env, redisUrl: 'redis://127.0.0.1:1', env: clusterEnv });
      const line = String.raw`127\.0\.0\.1:\d+ \(partitions \d(, \d)?\): used`;
      assert.match(text.stdout, new RegExp(`^memory {6}${line} .+\n {12}${line} `, 'm'));
      for (const server of servers) {
        const node = testClient(`redis://${server.address}`);
        try {
          for (const i of server.partitions) {
            assert.equal(await node.exists(`{p${i}}:processed`), 1, `p${i} on ${server.address}`);
          }
          assert.ok(server.usedMemory > 0);
        } finally {
          node.disconnect();
        }
      }
    } finally {
      await cluster.stop();
    }
  });
});

describe('outbox status: parked and dead letters', () => {
  it('shows their counts and bytes, warns above the thresholds, and lists at most 20 blocked aggregates', async () => {
    await blockOrders(25);
    assert.equal(await h.client.llen('outbox.events:dead'), 25);
    assert.equal(await h.client.hlen('outbox.events:parked'), 25);

    const quiet = (await h.cli('status')).stdout;
    const parkedBytes = await usage('outbox.events:parked');
    const deadBytes = await usage('outbox.events:dead');
    assert.ok(parkedBytes > 0 && deadBytes > 0);
    assert.match(quiet, /^held {8}parked 25 \([\d.]+ KB\), dead letters 25 \([\d.]+ KB\), the oldest [\d.]+ m?s old$/m);
    assert.doesNotMatch(quiet, /^WARN .*(parked|dead letter)/m, 'below the defaults (1000 parked, 1h)');
    const blocked = /^blocked     (.*)$/m.exec(quiet)![1];
    assert.equal(blocked.match(/\(seq 1 dead-lettered, 1 waiting: seq 2\)/g)!.length, 20);
    assert.match(blocked, /^order:1 \(seq 1 dead-lettered, 1 waiting: seq 2\), order:10 .* and 5 more: "outbox/);

    const loud = await h.cli('status', '--json', '--warn-parked', '24', '--warn-dead-age', '0s');
    const json = JSON.parse(loud.stdout);
    assert.deepEqual(
      { ...json.held, oldestDeadLetterAgeMs: typeof json.held.oldestDeadLetterAgeMs },
      { parked: 25, parkedBytes, deadLettered: 25, deadLetterBytes: deadBytes, oldestDeadLetterAgeMs: 'number' },
    );
    assert.equal(json.blocked.length, 20);
    assert.equal(json.blockedTotal, 25);
    assert.match(json.alerts[0], /^25 events parked \(.+\), above 24 \(--warn-parked \/ OUTBOX_WARN_PARKED\)/);
    assert.match(json.alerts[1], /^a dead letter is .+ old, older than 0 ms \(--warn-dead-age \/ OUTBOX_WARN_DEAD_AGE/);
    const fromEnv = await runCli(['status'], { ...h.env, env: { OUTBOX_WARN_PARKED: '3' } });
    assert.match(fromEnv.stdout, /^WARN        25 events parked .+, above 3 /m);
  });

  it('refuses a bad threshold in one line, before anything connects', async () => {
    for (const [args, message] of [
      [['--warn-dead-age', '5'], /^outbox: --warn-dead-age must be a duration like 60s, 500ms or 2m, got "5" without/],
      [['--warn-parked', 'many'], /^outbox: --warn-parked must be a whole number from 0 to 1000000000, got "many"\n$/],
    ] as const) {
      const result = await runCli(['status', ...args], { ...h.env, redisUrl: 'redis://127.0.0.1:1' });
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
      assert.equal(result.stderr.trim().split('\n').length, 1);
    }
  });
});

describe('namespace', () => {
  it('outbox lab with OUTBOX_NAMESPACE leaves no key outside the namespace (the dualwrite list included)', async () => {
    await h.client.flushall();
    const env = { ...h.env, env: { OUTBOX_NAMESPACE: 'lab-ns' } };
    const lab = await runCli(['lab'], env);
    assert.equal(lab.code, 0, lab.stdout + lab.stderr);
    assert.match(readFileSync(join(h.env.dir, 'dualwrite.out'), 'utf8'), /^INCONSISTENT orders=3 published=2\n/);
    const dualwrite = await runCli(['dualwrite', '--count', '4'], env);
    assert.equal(dualwrite.code, 0, dualwrite.stderr);
    assert.match(dualwrite.stdout, /^INCONSISTENT orders=4 published=3$/m);

    const all: string[] = [];
    let cursor = '0';
    do {
      const [next, found] = await h.client.scan(cursor, 'COUNT', 1000);
      cursor = next;
      all.push(...found);
    } while (cursor !== '0');
    assert.ok(all.includes('lab-ns:outbox.dualwrite.events') && all.includes('lab-ns:processed'), all.join(' '));
    assert.deepEqual(all.filter((key) => !key.startsWith('lab-ns:')), []);
  });
});
