import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { createConsumerEngine, type ConsumeStats } from '../shared/outbox/consumer/consumer.js';
import { createConsumer, defineEvents, defineRedisHandlers, effect } from '../shared/outbox/index.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { handlers as accountHandlers } from './fixtures/account-handlers.js';
import { handlers as echoHandlers } from './fixtures/echo-handlers.js';
import { useHarness } from './helpers/harness.js';
import { guardOf } from './helpers/guards.js';

const h = useHarness();
const DRAIN = fileURLToPath(new URL('./fixtures/drain-accounts.js', import.meta.url));
const MAX = Number.MAX_SAFE_INTEGER;

let redis: Redis;

/** A message of account `account` as the relay would push it. */
function message(account: number, seq: number, type: string, payload: object): string {
  return JSON.stringify({ event_id: `acc-${account}-${seq}`, aggregate_id: `account:${account}`, seq, event_type: type, payload, store_id: h.storeId });
}

/** Drains the queue in this process with the accounts handler set; resolves the stats and the problems met. */
async function drain(options: { handlers?: Parameters<typeof createConsumer>[0]['handlers']; batchSize?: number } = {}): Promise<{ stats: ConsumeStats; problems: string[] }> {
  const problems: string[] = [];
  const consumer = await createConsumer({ redis, handlers: options.handlers ?? accountHandlers, consumerId: 'accounts', batchSize: options.batchSize, onProblem: (p) => problems.push(p) });
  const stats = await consumer.drain();
  await consumer.close();
  return { stats, problems };
}

/** Runs the drain fixture in its own process (so a crash point can kill it). */
function drainProcess(batch: number, threads: number | undefined, env: Record<string, string>): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string }> {
  const child = spawn(process.execPath, [DRAIN, h.redis.url, String(batch), ...(threads ? [String(threads)] : [])], { env: { ...process.env, OUTBOX_CRASH_POINTS: '', ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout }));
  });
}

/**
 * `accounts` accounts, each: opened (seq 1), two deposits (a, 2a), scored a/2 points, and closed
 * when even (seq 5). Interleaved across accounts the way a relay would push them.
 */
function lifecycles(accounts: number): string[] {
  const perAccount = Array.from({ length: accounts }, (_, i) => {
    const a = i + 1;
    const events = [
      message(a, 1, 'AccountOpened', { owner: `owner-${a}` }),
      message(a, 2, 'Deposited', { amount: a }),
      message(a, 3, 'Deposited', { amount: 2 * a }),
      message(a, 4, 'Scored', { points: a / 2 }),
    ];
    if (a % 2 === 0) events.push(message(a, 5, 'AccountClosed', {}));
    return events;
  });
  const queue: string[] = [];
  for (let seq = 0; seq < 5; seq += 1) for (const events of perAccount) if (events[seq]) queue.push(events[seq]);
  return queue;
}

/** What must hold once `lifecycles(accounts)` was drained: every effect applied exactly once, each aggregate in seq order. */
async function assertLifecyclesApplied(accounts: number): Promise<void> {
  const events = accounts * 4 + Math.floor(accounts / 2);
  assert.equal(await h.client.hlen('processed'), events);
  assert.deepEqual(await h.client.keys('outbox.events:processing:*').then((keys) => Promise.all(keys.map((k) => h.client.llen(k)))).then((l) => l.filter(Boolean)), []);
  assert.deepEqual(new Set(Object.values(await h.client.hgetall('outbox:apply-count'))), new Set(['1']));
  const balances = await h.client.hgetall('balances');
  const scores = await h.client.zrange('leaderboard', '0', '-1', 'WITHSCORES');
  const open = (await h.client.smembers('accounts:open')).sort((x, y) => Number(x) - Number(y));
  for (let a = 1; a <= accounts; a += 1) {
    assert.equal(balances[String(a)], String(3 * a), `balance of account ${a}`);
    assert.equal(Number(scores[scores.indexOf(String(a)) + 1]), a / 2, `score of account ${a}`);
    assert.equal(await h.client.get(`account:${a}:status`), a % 2 === 0 ? 'closed' : 'open');
    assert.deepEqual(await h.client.hgetall(`account:${a}`), a % 2 === 0 ? { 'last-seq': '3' } : { owner: `owner-${a}`, 'last-seq': '3' });
  }
  assert.deepEqual(open, Array.from({ length: Math.ceil(accounts / 2) }, (_, i) => String(2 * i + 1)));
  await assertSeqOrder();
}

/** Every aggregate's events were applied in seq order (by the applyOrder of their processed entries). */
async function assertSeqOrder(): Promise<void> {
  const entries = Object.values(await h.client.hgetall('processed')).map((v) => JSON.parse(v) as { aggregate: string; seq: number; applyOrder: number });
  const byAggregate = new Map<string, { seq: number; applyOrder: number }[]>();
  for (const e of entries) byAggregate.set(e.aggregate, [...(byAggregate.get(e.aggregate) ?? []), e]);
  for (const [aggregate, list] of byAggregate) {
    const seqs = list.sort((x, y) => x.applyOrder - y.applyOrder).map((e) => e.seq);
    assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + 1), `aggregate ${aggregate} applied in the order ${seqs}`);
  }
}

describe('Redis effects as data', () => {
  before(async () => {
    redis = await connectRedis(h.redis.url);
  });
  after(() => redis.disconnect());

  it('applies every op (hincrby, hset, hdel, sadd, srem, zincrby, set) exactly once, however often the events are delivered', async () => {
    const queue = lifecycles(6);
    await h.client.rpush('outbox.events', ...queue, ...queue);
    const first = await drain({ batchSize: 7 });
    assert.deepEqual([first.stats.applied, first.stats.duplicates, first.problems], [queue.length, queue.length, []]);
    await h.client.rpush('outbox.events', ...queue.reverse());
    const again = await drain();
    assert.deepEqual([again.stats.applied, again.stats.duplicates], [0, queue.length]);
    await assertLifecyclesApplied(6);
    const processed = JSON.parse((await h.client.hget('processed', 'acc-1-1'))!);
    assert.deepEqual({ ...processed, appliedAt: typeof processed.appliedAt }, { type: 'AccountOpened', aggregate: 'account:1', seq: 1, effects: 3, applyOrder: 1, appliedAt: 'number' });
  });

  it('an event whose effect would fail (wrong type, non-integer, out of range, alone or with the batch before it) applies none of its effects and stays in the processing list; the others apply', async () => {
    await h.client.set('leaderboard', 'a string, not a zset');
    await h.client.hset('balances', '3', 'abc', '4', String(MAX - 2), '5', String(MAX - 3));
    await h.client.hset('account:6:status', 'a', 'hash');
    const batch = [
      message(1, 1, 'Deposited', { amount: 5 }),
      message(2, 1, 'Scored', { points: 1 }),
      message(3, 1, 'Deposited', { amount: 1 }),
      message(4, 1, 'Deposited', { amount: 5 }),
      message(5, 1, 'Deposited', { amount: 2 }),
      message(5, 2, 'Deposited', { amount: 2 }),
      message(6, 1, 'AccountOpened', { owner: 'six' }),
      message(7, 1, 'Deposited', { amount: 3 }),
    ];
    await h.client.rpush('outbox.events', ...batch);
    const { stats, problems } = await drain();
    assert.deepEqual([stats.applied, stats.invalid], [3, 5]);
    assert.deepEqual(await h.client.lrange('outbox.events:processing:accounts', 0, -1), [batch[1], batch[2], batch[3], batch[5], batch[6]]);
    assert.equal(problems.length, 5);
    assert.match(problems[0], /acc-2-1 \(zincrby leaderboard\): the key holds a string, not a zset/);
    assert.match(problems[1], /acc-3-1 \(hincrby balances\): field 3 holds "abc", not an integer/);
    assert.match(problems[2], /acc-4-1 \(hincrby balances\): field 4 would leave the exact integer range/);
    assert.match(problems[3], /acc-5-2 \(hincrby balances\): field 5 would leave the exact integer range/);
    assert.match(problems[4], /effect 3 of event acc-6-1 \(set account:6:status\): the key holds a hash, not a string/);
    assert.deepEqual(await h.client.hgetall('balances'), { 1: '5', 3: 'abc', 4: String(MAX - 2), 5: String(MAX - 1), 7: '3' });
    // acc-6-1's first two effects would have worked: neither was applied.
    assert.deepEqual([await h.client.exists('account:6', 'accounts:open', 'account:3', 'account:4'), await h.client.hexists('account:5', 'last-seq')], [0, 1]);
    assert.equal(await h.client.hget('account:5', 'last-seq'), '1');
    assert.deepEqual(await h.client.hmget('processed', 'acc-2-1', 'acc-3-1', 'acc-5-2', 'acc-6-1'), [null, null, null, null]);
    assert.equal(await h.client.exists('outbox:seen:acc-2-1', 'outbox:seen:acc-6-1'), 0);

    // Once an operator repairs the state, the next run recovers them and applies them, once.
    await h.client.del('leaderboard', 'account:6:status');
    await h.client.hset('balances', '3', '0', '4', '0', '5', '0');
    const repaired = await drain();
    assert.deepEqual([repaired.stats.recovered, repaired.stats.applied, repaired.problems], [5, 5, []]);
    assert.deepEqual(await h.client.hgetall('balances'), { 1: '5', 3: '1', 4: '5', 5: '2', 7: '3' });
    assert.equal(await h.client.get('account:6:status'), 'open');
    assert.deepEqual(await h.client.zrange('leaderboard', '0', '-1', 'WITHSCORES'), ['2', '1']);
  });

  it('the apply script refuses effects on the project\'s keys, and the handler set dead-letters a handler that returns one', async () => {
    // Past the handler set's own check: straight to the script, as a buggy caller could.
    const raws = [message(1, 1, 'Raw', {}), message(2, 1, 'Raw', {}), message(3, 1, 'Raw', {}), message(4, 1, 'Raw', {})];
    const effectsOf: Record<number, [string, string, string, string][]> = {
      1: [['hset', 'outbox:meta', 'store', 'stolen']],
      2: [['hset', 'processed', 'x', 'y']],
      3: [['set', 'bull:outbox-relay:meta', '', 'x']],
      4: [['sadd', 'fine', 'member', '']],
    };
    const problems: string[] = [];
    const engine = createConsumerEngine(redis, {
      consumerId: 'raw',
      handler: (events) => events.map((e) => ({ effects: effectsOf[Number(e.aggregateId.slice('account:'.length))] })),
      onProblem: (p) => problems.push(p),
    });
    await h.client.rpush('outbox.events', ...raws);
    const stats = await engine.drain();
    assert.deepEqual([stats.applied, stats.invalid], [1, 3]);
    assert.equal(problems.filter((p) => /not a key effects may touch/.test(p)).length, 3);
    assert.equal(await h.client.hget('outbox:meta', 'store'), h.storeId);
    assert.deepEqual([await h.client.hexists('processed', 'x'), await h.client.exists('bull:outbox-relay:meta')], [0, 0]);
    assert.deepEqual(await h.client.smembers('fine'), ['member']);

    await h.client.del('outbox.events:processing:raw');
    const sneaky = defineRedisHandlers(defineEvents({ Hack: { aggregate: 'account', payload: z.object({}) } }), { Hack: () => [effect.set('outbox:meta', 'x')] });
    await h.client.rpush('outbox.events', message(9, 1, 'Hack', {}), message(9, 2, 'Unknown', {}), message(10, 1, 'Deposited', { amount: 'ten' }));
    const result = await drain({ handlers: sneaky });
    assert.equal(result.stats.dead, 3);
    const reasons = (await h.client.lrange('outbox.events:dead', 0, -1)).map((d) => JSON.parse(d).reason);
    assert.deepEqual(reasons, [
      'the Hack handler returned a bad effect: set on "outbox:meta": effects may not touch the outbox\'s own keys (outbox*, processed, bull:*); pick another key',
      'unknown event type "Unknown": declare it in defineEvents',
      'unknown event type "Deposited": declare it in defineEvents',
    ]);
    await h.client.rpush('outbox.events', message(10, 1, 'Deposited', { amount: 'ten' }));
    await drain();
    assert.equal(JSON.parse((await h.client.lindex('outbox.events:dead', -1))!).reason, 'Deposited payload: amount: Invalid input: expected number, received string');
  });

  it('a payload string with a lone surrogate (valid JSON, "\\ud800") that a handler passes on is applied with U+FFFD, the consumer not stuck', async () => {
    await h.client.rpush('outbox.events', message(1, 1, 'AccountOpened', { owner: 'half \ud800 pair' }), message(2, 1, 'AccountOpened', { owner: 'two' }));
    const { stats, problems } = await drain();
    assert.deepEqual([stats.applied, problems], [2, []]);
    assert.deepEqual([await h.client.hget('account:1', 'owner'), await h.client.hget('account:2', 'owner')], ['half \ufffd pair', 'two']);
  });

  it('parks an account event that arrives ahead of a gap and applies the account\'s events in seq order once it is filled', async () => {
    await h.client.rpush('outbox.events', message(1, 3, 'AccountClosed', {}), message(1, 2, 'Deposited', { amount: 4 }), message(2, 1, 'AccountOpened', { owner: 'two' }));
    const parked = await drain();
    assert.deepEqual([parked.stats.applied, parked.stats.parked], [1, 2]);
    assert.deepEqual(Object.keys(await h.client.hgetall('outbox.events:parked')).sort(), ['account:1:2', 'account:1:3']);
    assert.equal(await h.client.exists('balances', 'account:1:status'), 0);
    await h.client.rpush('outbox.events', message(1, 1, 'AccountOpened', { owner: 'one' }));
    const filled = await drain();
    assert.equal(filled.stats.applied, 3);
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    assert.deepEqual([await h.client.get('account:1:status'), await h.client.hget('balances', '1'), await guardOf(h.client, 'account:1')], ['closed', '4', '3']);
    assert.deepEqual(await h.client.smembers('accounts:open'), ['2']);
    await assertSeqOrder();
  });

  it('puts effects under the namespace, like every key of the project, and refuses the project\'s keys there too', async () => {
    const namespaced = await connectRedis(h.redis.url, { namespace: 'tenant-a' });
    try {
      await h.client.hset('tenant-a:outbox:meta', 'store', h.storeId);
      await h.client.rpush('tenant-a:outbox.events', message(1, 1, 'AccountOpened', { owner: 'one' }), message(1, 2, 'Deposited', { amount: 7 }));
      const consumer = await createConsumer({ redis: namespaced, handlers: accountHandlers, consumerId: 'accounts' });
      assert.equal((await consumer.drain()).applied, 2);
      assert.deepEqual(
        [await h.client.hget('tenant-a:balances', '1'), await h.client.get('tenant-a:account:1:status'), await h.client.exists('balances', 'account:1:status')],
        ['7', 'open', 0],
      );
      // A key that is the project's under the namespace is refused by the script too.
      const problems: string[] = [];
      const engine = createConsumerEngine(namespaced, { consumerId: 'raw', handler: (events) => events.map(() => ({ effects: [['set', 'outbox:meta', '', 'x'] as const] })), onProblem: (p) => problems.push(p) });
      await h.client.rpush('tenant-a:outbox.events', message(2, 1, 'Raw', {}));
      assert.equal((await engine.drain()).invalid, 1);
      assert.match(problems[0], /not a key effects may touch/);
      assert.equal(await h.client.type('tenant-a:outbox:meta'), 'hash');
    } finally {
      namespaced.disconnect();
    }
  });

  it('createConsumer refuses bad options in one line, before it touches Redis', async () => {
    const offline = new Redis('redis://127.0.0.1:1', { lazyConnect: true });
    try {
      const refused = async (options: object, message: string) =>
        assert.rejects(createConsumer({ redis: offline, handlers: accountHandlers, ...options }), { name: 'ConfigError', message });
      await refused({ batchSize: 0 }, 'createConsumer: batchSize must be an integer from 1 to 100000, got 0');
      await refused({ consumerId: 'a b' }, 'createConsumer: consumerId must be 1-64 letters, digits, ".", "_" or "-", got "a b"');
      await refused({ handlers: { OrderPlaced: () => [] } }, 'createConsumer: handlers is not a handler set (no mode "redis" or "database"): make it with defineRedisHandlers(events, {...})');
      const nowhere = new URL('./no-such-module.js', import.meta.url);
      await assert.rejects(createConsumer({ redis: offline, handlers: nowhere }), (error: Error) => {
        assert.equal(error.name, 'ConfigError');
        assert.ok(error.message.startsWith(`handlers module ${nowhere.href} cannot be loaded: Cannot find module`), error.message);
        return true;
      });
      const noSet = new URL('../shared/outbox/consumer/effects.js', import.meta.url);
      await refused({ handlers: noSet }, `handlers module ${noSet.href}: its export "handlers" is not a handler set: make it with defineRedisHandlers(events, {...})`);
      assert.equal(offline.status, 'wait', 'no connection was attempted');
    } finally {
      offline.disconnect();
    }
  });

  it('createConsumer fails, in one line, on a handlers module that loads in this thread but not on its worker threads', async () => {
    const module = new URL('./fixtures/main-thread-only-handlers.js', import.meta.url);
    await assert.rejects(createConsumer({ redis, handlers: module, threads: 2 }), {
      name: 'ConfigError',
      message: `handlers module ${module.href} cannot be loaded: this module does not load on a worker thread`,
    });
    process.env.OUTBOX_TEST_EXIT_ON_THREAD = '1';
    try {
      await assert.rejects(createConsumer({ redis, handlers: module, threads: 2 }), {
        name: 'ConfigError',
        message: `handlers module ${module.href} cannot be loaded on a worker thread: worker exited with code: 3`,
      });
    } finally {
      delete process.env.OUTBOX_TEST_EXIT_ON_THREAD;
    }
  });

  it('keeps each account in seq order across lanes on worker threads', async () => {
    const queue = lifecycles(40);
    await h.client.rpush('outbox.events', ...queue);
    const run = await drainProcess(13, 3, {});
    assert.equal(run.code, 0);
    assert.equal(JSON.parse(run.stdout).applied, queue.length);
    await assertLifecyclesApplied(40);
  });

  it('a handler on a worker thread gets each event as a handler in this thread does (the events cross as JSON text)', async () => {
    const payloads = [
      {},
      { none: null, list: [1, null, [2, { deep: 'x' }]], empty: '' },
      { text: 'é ü 𝄞 \u2028 "quoted" \\ /', half: 'a \ud800 b' },
      { big: Number.MAX_SAFE_INTEGER, small: -1e-7, exp: 1e21, frac: 0.1 },
    ];
    // Two aggregates, two events each; created_at on some (a relay's), absent on the others (an older relay's).
    const messages = payloads.map((payload, i) =>
      JSON.stringify({ event_id: `echo-${i}`, aggregate_id: `echo:${i % 2}`, seq: Math.floor(i / 2) + 1, event_type: 'Echo', payload, store_id: h.storeId, ...(i % 2 ? { created_at: 1_700_000_000_000 + i } : {}) }),
    );
    const seen = async (namespace: string, handlers: Parameters<typeof createConsumer>[0]['handlers']) => {
      const namespaced = await connectRedis(h.redis.url, { namespace });
      try {
        await h.client.hset(`${namespace}:outbox:meta`, 'store', h.storeId);
        await h.client.rpush(`${namespace}:outbox.events`, ...messages);
        const consumer = await createConsumer({ redis: namespaced, handlers, consumerId: 'echo' });
        assert.equal((await consumer.drain()).applied, messages.length);
        await consumer.close();
        return await Promise.all(messages.map((_, i) => h.client.get(`${namespace}:seen:echo-${i}`)));
      } finally {
        namespaced.disconnect();
      }
    };
    const inThread = await seen('here', echoHandlers);
    assert.deepEqual(JSON.parse(inThread[3]!), {
      keys: ['eventId', 'storeId', 'aggregateType', 'aggregateId', 'seq', 'type', 'payload'],
      event: { eventId: 'echo-3', storeId: h.storeId, aggregateType: 'echo', aggregateId: '1', seq: 2, type: 'Echo', payload: payloads[3] },
    });
    assert.deepEqual(JSON.parse(inThread[1]!).event.payload, payloads[1]);
    assert.deepEqual(await seen('threads', new URL('./fixtures/echo-handlers.js', import.meta.url)), inThread);
  });

  for (const point of ['consumer.after-lmove', 'consumer.after-apply']) {
    for (const threads of [undefined, 2]) {
      it(`a consumer killed at ${point} (${threads ? 'worker threads' : 'in-thread handlers'}) applies every effect exactly once after the rerun`, async () => {
        const queue = lifecycles(30);
        // Redeliveries too: some events a second time, after their originals.
        await h.client.rpush('outbox.events', ...queue, ...queue.filter((_, i) => i % 7 === 0));
        const crashed = await drainProcess(10, threads, { OUTBOX_CRASH_POINTS: point });
        assert.equal(crashed.signal, 'SIGKILL');
        const applied = await h.client.hlen('processed');
        if (point === 'consumer.after-lmove') {
          assert.equal(applied, 0);
          assert.equal(await h.client.llen('outbox.events:processing:accounts'), 10, 'the crash left the round in the processing list');
        } else {
          assert.ok(applied >= 1 && applied < 135, `died after the first apply, before the end: ${applied} applied`);
        }
        const rerun = await drainProcess(10, threads, {});
        assert.equal(rerun.code, 0);
        await assertLifecyclesApplied(30);
      });
    }
  }
});
