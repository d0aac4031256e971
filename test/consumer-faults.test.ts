import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { outboxRowOf } from './helpers/stores.js';
import { toMessage } from '../shared/outbox/store/events.js';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { createLogger } from '../shared/outbox/logger.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { consumerHealth } from '../shared/runtime/health/consumer-health.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { dropAllGuards, guardOf, setGuard } from './helpers/guards.js';
import { guardKeyOf } from '../shared/outbox/redis/guards.js';

const h = useHarness();
const o = orders(() => h.env);

function message(aggregateId: number, seq: number | string, type = 'OrderPlaced', sku = 'SKU-X') {
  const payload = type === 'OrderQtyChanged' ? { orderId: aggregateId, sku, qty: 2, previousQty: 1 } : { orderId: aggregateId, sku, qty: 1 };
  return `{"event_id":"evt-${aggregateId}-${seq}","aggregate_id":"order:${aggregateId}","seq":${seq},"event_type":"${type}","payload":${JSON.stringify(payload)},"store_id":"${h.storeId}"}`;
}

const PROCESSING = 'outbox.events:processing:cli';

/** `outbox consume`, which must exit 0; resolves stdout and stderr. */
async function consume(): Promise<{ stdout: string; stderr: string }> {
  const result = await runCli(['consume'], h.env);
  assert.equal(result.code, 0, result.stderr);
  return result;
}

describe('the apply script under corrupt Redis state', () => {
  it('a parked entry that is not JSON: the event is applied, the entry kept as a dead letter, nothing lost', async () => {
    await h.client.hset('outbox.events:parked', 'order:1:2', 'not json {');
    await h.client.rpush('outbox.events', message(1, 1));
    const { stdout, stderr } = await consume();
    assert.match(stdout, /applied 1, duplicates skipped 0, parked 0/);
    assert.match(stderr, /^outbox: bad state in Redis: outbox\.events:parked field order:1:2 was not valid JSON: moved to outbox\.events:dead$/m);
    assert.equal(await h.client.llen(PROCESSING), 0);
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    const [dead] = (await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry));
    assert.deepEqual([dead.reason, dead.message], ['corrupt parked entry order:1:2 (not the JSON the consumer writes)', 'not json {']);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-X'), '1');
  });

  for (const [what, key, field] of [
    ['a non-numeric applied seq', guardKeyOf('order:1'), 'order:1'],
    ['a non-numeric inventory field', 'inventory:reserved', 'SKU-X'],
  ] as const) {
    it(`${what}: that event stays in the processing list, the others are applied, verify names the field`, async () => {
      await h.client.hset(key, field, 'garbage');
      await h.client.rpush('outbox.events', message(1, 1), message(2, 1, 'OrderPlaced', 'SKU-Y'));
      const { stdout, stderr } = await consume();
      assert.match(stdout, /applied 1, .* left in outbox\.events:processing:cli for bad state in Redis 1/);
      // The applied-seq field by its hash; an effect's field by the effect that needs it (hincrby inventory:reserved).
      assert.match(stderr, new RegExp(`bad state in Redis: (effect 1 of event evt-1-1 \\(hincrby )?${key}\\)?:? field ${field} holds "garbage", not an integer`));
      assert.deepEqual(await h.client.lrange(PROCESSING, 0, -1), [message(1, 1)]);
      assert.deepEqual(await h.client.hkeys('processed'), ['evt-2-1']);
      const verify = await runCli(['verify'], h.env);
      assert.match(verify.stdout, new RegExp(`corrupt entries in Redis \\(not a number / not JSON\\) +0 +1 +FAIL\\n +e\\.g\\. ${key} ${field} = "garbage"`));

      // Fixed by an operator: the next run applies what was left.
      await h.client.hdel(key, field);
      assert.match((await consume()).stdout, /applied 1/);
      assert.equal(await h.client.llen(PROCESSING), 0);
      assert.deepEqual((await h.client.hkeys('processed')).sort(), ['evt-1-1', 'evt-2-1']);
    });
  }

  it('a non-numeric applied counter in stats: nothing is applied or lost until it is fixed; another bad counter is only reported', async () => {
    await h.client.hset('outbox:stats', 'applied', 'x');
    await h.client.rpush('outbox.events', message(1, 1));
    const first = await consume();
    assert.match(first.stdout, /applied 0, .* left in outbox\.events:processing:cli for bad state in Redis 1/);
    assert.match(first.stderr, /outbox:stats field applied holds "x", not an integer/);
    assert.equal(await h.client.llen(PROCESSING), 1);

    await h.client.hset('outbox:stats', 'applied', '0', 'duplicates', 'y');
    const second = await consume();
    assert.match(second.stdout, /applied 1/);
    assert.match(second.stderr, /outbox:stats field duplicates holds "y", not an integer/);
    assert.equal(await h.client.hget('outbox:stats', 'duplicates'), 'y');
    assert.equal(await h.client.llen(PROCESSING), 0);
  });

  it('a non-numeric apply count: the event is applied and the count that could not be kept is reported', async () => {
    // An event of the store: verify reads the apply counts of the store's events (no HGETALL of a growing hash).
    o.place(1, { sku: 'SKU-X' });
    const id = outboxRowOf(h.env.dir, 'order:1', 1).event_id;
    await h.client.hset('outbox:apply-count', id, 'garbage');
    await o.relay();
    const { stdout, stderr } = await consume();
    assert.match(stdout, /applied 1/);
    assert.match(stderr, new RegExp(`bad state in Redis: outbox:apply-count field ${id} holds a non-integer: this application was not counted`));
    assert.equal(await h.client.llen(PROCESSING), 0);
    assert.match((await runCli(['verify'], h.env)).stdout, /corrupt entries in Redis \(not a number \/ not JSON\) +0 +1 +FAIL/);
  });

  it('the app tries refused events again once the state is fixed, its health saying why meanwhile (issue 30)', async () => {
    o.place(3, { sku: 'SKU-X' });
    await o.relay();
    // Bad state: the lab's effect adds to a hash that is now a string.
    await h.client.set('inventory:reserved', 'not a hash');
    const redis = await connectRedis(h.redis.url);
    const consumer = await createConsumer({ redis, handlers, consumerId: 'app' });
    const running = consumer.start({ log: createLogger('test', () => {}), connectBlocking: () => connectRedis(h.redis.url), statsIntervalMs: 0 });
    try {
      await waitFor(() => running.consumerStats.snapshot().refusedWaiting === 3, { message: 'the 3 events were not refused' });
      const health = await consumerHealth({ app: 'outbox-consumer', dir: h.env.dir, consumerId: 'app' }, redis, running.consumerStats);
      assert.equal(health.ok, false);
      assert.match(health.reason ?? '', /^stuck: 3 messages refused for bad state in Redis \(.*\(hincrby inventory:reserved\): the key holds a string, not a hash\)/);
      assert.equal(await h.client.llen('outbox.events:processing:app'), 3);
      await h.client.del('inventory:reserved');
      await waitFor(async () => (await h.client.hlen('processed')) === 3, { timeoutMs: 10_000, message: 'the fixed state did not let them through' });
      assert.equal(await h.client.llen('outbox.events:processing:app'), 0);
      await waitFor(() => running.consumerStats.snapshot().refusedWaiting === 0);
    } finally {
      await running.stop();
      await consumer.close();
      redis.disconnect();
    }
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-X'), '3');
    await o.verify('0s');
  });

  it('verify files a processed entry that is not JSON under corrupt entries, not out of seq order (issue 30)', async () => {
    o.place(1, { sku: 'SKU-X' });
    o.changeQty(1, 2);
    await o.relay();
    await o.consume();
    const id = outboxRowOf(h.env.dir, 'order:1', 2).event_id;
    await h.client.hset('processed', id, 'not json {');
    const verify = await runCli(['verify', '--settle', '0s'], h.env);
    assert.equal(verify.code, 1, verify.stdout + verify.stderr);
    assert.match(verify.stdout, new RegExp(`corrupt entries in Redis \\(not a number / not JSON\\) +0 +1 +FAIL\\n +e\\.g\\. processed ${id} is not the JSON`));
    assert.match(verify.stdout, /aggregates applied out of seq order +0 +0 +ok/);
  });

  it('dead-letter drop --stale drops the entries whose event was applied since, and only those (issue 30)', async () => {
    o.place(2, { sku: 'SKU-X' });
    await o.relay();
    await o.consume();
    // As a wipe leaves them: messages in flight dead-lettered, their events applied again by the rebuild.
    const applied = toMessage(outboxRowOf(h.env.dir, 'order:1', 1), h.storeId);
    const notApplied = message(2, 5);
    for (const m of [applied, notApplied]) {
      await h.client.rpush('outbox.events:dead', JSON.stringify({ reason: 'this Redis serves no store', message: m, deadAt: Date.now() }));
    }
    const dropped = await runCli(['dead-letter', 'drop', '--stale', '--yes'], h.env);
    assert.equal(dropped.code, 0, dropped.stderr);
    assert.match(dropped.stdout, /^1 dead-letter entr\(ies\) dropped \(stale: their events are applied\)$/m);
    assert.deepEqual((await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry).message), [notApplied]);
    const refused = await runCli(['parked', 'drop', '--stale'], h.env);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /--stale goes with "outbox dead-letter drop"/);
  });

  it('seqs are exact integers: a parked field for seq 2^53-1 keeps every digit', async () => {
    await setGuard(h.client, 'order:5', '9007199254740989');
    await h.client.rpush('outbox.events', message(5, '9007199254740991'));
    assert.match((await consume()).stdout, /parked 1/);
    const [field] = await h.client.hkeys('outbox.events:parked');
    assert.equal(field, 'order:5:9007199254740991');
    assert.match(JSON.parse((await h.client.hget('outbox.events:parked', field))!).reason, /^gap: expected seq 9007199254740990, got 9007199254740991$/);
  });
});

describe('double effects', () => {
  it('an event already in processed is not applied again, even with its dedupe marker and applied seq gone', async () => {
    o.place(1, { sku: 'SKU-A', qty: 2 });
    o.changeQty(1, 5);
    await o.relay();
    await o.consume();
    const markers = await h.client.keys('outbox:seen:*');
    await h.client.del(...markers);
    await dropAllGuards(h.client);
    await h.cli('replay', '--from', '1');
    await o.relay();
    assert.match((await h.cli('consume')).stdout, /applied 0, duplicates skipped 2/);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-A'), '5');
    assert.deepEqual(Object.values(await h.client.hgetall('outbox:apply-count')), ['1', '1']);
    // The duplicates put the lost seq guard back.
    assert.equal(await guardOf(h.client, 'order:1'), '2');
    await o.verify();
  });

  it('an event whose processed entry and applied seq are gone is still skipped while its dedupe marker lives', async () => {
    o.place(1, { sku: 'SKU-A', qty: 2 });
    o.place(1, { sku: 'SKU-A', qty: 3 });
    await o.relay();
    await o.consume();
    const [first] = await h.client.hkeys('processed');
    await h.client.hdel('processed', first);
    await dropAllGuards(h.client);
    await h.cli('replay', '--from', '1');
    await o.relay();
    // The marker of the one, the processed entry of the other: both skipped, in one call.
    assert.match((await consume()).stdout, /applied 0, duplicates skipped 2/);
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-A'), '5');
    assert.deepEqual(Object.values(await h.client.hgetall('outbox:apply-count')), ['1', '1']);
  });

  it('verify flags a double effect forced by removing the processed entry too, from the per-event apply count', async () => {
    o.place(1, { sku: 'SKU-A', qty: 2 });
    await o.relay();
    await o.consume();
    const [eventId] = await h.client.hkeys('processed');
    await h.client.del(...(await h.client.keys('outbox:seen:*')));
    await dropAllGuards(h.client);
    await h.client.hdel('processed', eventId);
    await h.cli('replay', '--from', '1');
    await o.relay();
    const consumed = await consume();
    assert.match(consumed.stdout, /applied 1/);
    assert.match(consumed.stderr, new RegExp(`event ${eventId} was applied more than once`));
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-A'), '4');
    const verify = await runCli(['verify'], h.env);
    assert.equal(verify.code, 1);
    assert.match(verify.stdout, new RegExp(`events applied more than once +0 +1 +FAIL\\n +e\\.g\\. ${eventId} \\(2 times\\)`));
  });
});

describe('held-message tools are byte-safe and say when they did less than asked', () => {
  it('a dead letter that is not valid UTF-8 can be retried byte for byte and dropped', async () => {
    const bytes = Buffer.from([0x7b, 0xff, 0xfe, 0x7d]);
    await h.client.rpush('outbox.events', bytes);
    assert.match((await h.cli('consume')).stdout, /dead-lettered 1/);
    assert.match((await h.cli('dead-letter', 'retry', '--id', '0')).stdout, /^1 dead-letter entr\(ies\) put back on outbox\.events$/m);
    assert.deepEqual(await h.client.lrangeBuffer('outbox.events', 0, -1), [bytes]);
    await o.consume();
    assert.match((await h.cli('dead-letter', 'drop', '--id', '0')).stdout, /^1 dead-letter entr\(ies\) dropped$/m);
    assert.equal(await h.client.llen('outbox.events:dead'), 0);
  });

  it('an entry that is not an envelope is not retried (exit 3, one line, kept) and can be dropped', async () => {
    await h.client.rpush('outbox.events:dead', 'not an envelope');
    const retry = await runCli(['dead-letter', 'retry', '--all'], h.env);
    assert.equal(retry.code, 3);
    assert.match(retry.stderr, /^outbox: retry did 0 of 1 dead-letter entr\(ies\): 1 are not an envelope the consumer writes and cannot be retried \(drop them\): run "outbox dead-letter list" again\n$/);
    assert.deepEqual(await h.client.lrange('outbox.events:dead', 0, -1), ['not an envelope']);
    assert.equal(await h.client.llen('outbox.events'), 0);
    assert.match((await h.cli('dead-letter', 'list')).stdout, /^0 .* not an envelope the consumer writes {2}not an envelope$/m);
    assert.match((await h.cli('dead-letter', 'drop', '--all')).stdout, /^1 dead-letter entr\(ies\) dropped$/m);
  });
});
