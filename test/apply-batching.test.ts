/**
 * Adversarial tests of the batched apply script (apply-events-14.lua), the one-script take
 * (move-to-processing-2.lua) and database mode's claim and complete (claim-event-11.lua,
 * complete-event-12.lua): calls whose events are NOT independent (the same event twice,
 * successive seqs, effects on one key), bad state it must refuse before its first write, and
 * data faults. Real redis-server, real scripts through their wrappers.
 */
import assert from 'node:assert/strict';
import { after, beforeEach, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { createConsumer, defineEvents, defineRedisHandlers, effect } from '../shared/outbox/index.js';
import { applyEvents, claimEvents, completeEvents, defineScripts, moveToProcessing, raiseAppliedSeq, requeueDeadLetter, requeueParked, type EventToApply, type EventToClaim } from '../shared/outbox/redis/scripts.js';
import { useHarness } from './helpers/harness.js';
import { guardOf, setGuard } from './helpers/guards.js';
import { guardKeyOf } from '../shared/outbox/redis/guards.js';

const h = useHarness();
const LIST = 'outbox.events:processing:review';
let redis: Redis;

beforeEach(() => {
  if (redis) return;
  redis = new Redis(h.redis.url);
  defineScripts(redis);
});
after(() => redis?.disconnect());

type Effect = [string, string, string, string];

/** An event of aggregate `agg` with `seq` (its raw message made from them unless given). */
function ev(id: string, agg: string, seq: number | string, effects: Effect[] = [], raw?: string): EventToApply {
  return {
    raw: raw ?? JSON.stringify({ event_id: id, aggregate_id: agg, seq, store_id: h.storeId }),
    eventId: id,
    storeId: h.storeId,
    aggregate: agg,
    seq: seq as number,
    effects,
    result: JSON.stringify({ ok: true }),
  };
}

/** Puts the events' messages in the processing list (as the take does) and applies them in one call. */
async function apply(events: EventToApply[], ttl = 60) {
  if (events.length) await h.client.rpush(LIST, ...events.map((e) => e.raw));
  return applyEvents(redis, LIST, events, ttl);
}

/** Every key with its type and content (TTL-free): what "Redis unchanged" compares. */
async function snapshot(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const key of (await h.client.keys('*')).sort()) {
    const type = await h.client.type(key);
    if (type === 'string') out[key] = await h.client.get(key);
    else if (type === 'hash') out[key] = await h.client.hgetall(key);
    else if (type === 'list') out[key] = await h.client.lrange(key, 0, -1);
    else if (type === 'set') out[key] = (await h.client.smembers(key)).sort();
    else if (type === 'zset') out[key] = await h.client.zrange(key, '0', '-1', 'WITHSCORES');
    out[key] = { type, value: out[key] };
  }
  return out;
}

describe('events of one call that depend on each other', () => {
  it('the same event twice in one call (a relay duplicate in one round) is applied once and both copies acked', async () => {
    const e = ev('e1', 'a', 1, [['hincrby', 'bal', 'a', '5']]);
    const r = await apply([e, { ...e }]);
    assert.deepEqual(r.outcomes, ['applied', 'duplicate']);
    assert.equal(await h.client.hget('bal', 'a'), '5');
    assert.equal(await h.client.hget('outbox:apply-count', 'e1'), '1');
    assert.equal(await h.client.llen(LIST), 0);
    assert.equal(await guardOf(h.client, 'a'), '1');
  });

  it('seqs n and n+1 of one aggregate in one call are both applied, effects on one field cumulative', async () => {
    const r = await apply([ev('e1', 'a', 1, [['hincrby', 'bal', 'a', '5']]), ev('e2', 'a', 2, [['hincrby', 'bal', 'a', '-2'], ['hincrby', 'bal', 'a', '10']])]);
    assert.deepEqual(r.outcomes, ['applied', 'applied']);
    assert.equal(await h.client.hget('bal', 'a'), '13');
    assert.equal(await guardOf(h.client, 'a'), '2');
    assert.deepEqual(await h.client.hgetall('outbox:apply-count'), { e1: '1', e2: '1' });
  });

  it('n+1 before n in one call: n+1 parked, then released to the queue head when n is applied, and applied from there', async () => {
    const r = await apply([ev('e2', 'a', 2, [['hset', 'h', 'f', 'two']]), ev('e1', 'a', 1, [['hset', 'h', 'f', 'one']])]);
    assert.deepEqual(r.outcomes, ['parked', 'applied']);
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    const queued = await h.client.lrange('outbox.events', 0, -1);
    assert.deepEqual(queued, [ev('e2', 'a', 2).raw]);
    const moved = await moveToProcessing(redis, LIST, 10);
    assert.deepEqual(moved.map(String), queued);
    const again = await applyEvents(redis, LIST, [ev('e2', 'a', 2, [['hset', 'h', 'f', 'two']])], 60);
    assert.deepEqual(again.outcomes, ['applied']);
    assert.equal(await h.client.hget('h', 'f'), 'two');
    assert.deepEqual(await h.client.hgetall('outbox:stats'), { applied: '2', parked: '1', unparked: '1' });
  });

  it('a gap filled within a call (n+2, n+1, n): n applied, n+1 and n+2 released together to the queue head in seq order, ahead of what was queued', async () => {
    await h.client.rpush('outbox.events', ev('q1', 'b', 1).raw);
    const r = await apply([ev('e3', 'a', 3), ev('e2', 'a', 2), ev('e1', 'a', 1)]);
    assert.deepEqual(r.outcomes, ['parked', 'parked', 'applied']);
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), [ev('e2', 'a', 2).raw, ev('e3', 'a', 3).raw, ev('q1', 'b', 1).raw]);
    await moveToProcessing(redis, LIST, 2);
    assert.deepEqual((await applyEvents(redis, LIST, [ev('e2', 'a', 2), ev('e3', 'a', 3)], 60)).outcomes, ['applied', 'applied']);
    assert.equal(await guardOf(h.client, 'a'), '3');
    assert.deepEqual(await h.client.hgetall('outbox:stats'), { applied: '3', parked: '2', unparked: '2' });
  });

  it('a chain of 300 parked events: applying its predecessor releases the first 256 in seq order, the 256th applied releases the other 44; none lost, none twice', async () => {
    const chain = Array.from({ length: 300 }, (_, k) => ev(`c${k + 2}`, 'a', k + 2, [['hincrby', 'sum', 'a', String(k + 2)]]));
    assert.ok((await apply(chain)).outcomes.every((o) => o === 'parked'));
    assert.equal(await h.client.hlen('outbox.events:parked'), 300);
    assert.deepEqual((await apply([ev('c1', 'a', 1, [['hincrby', 'sum', 'a', '1']])])).outcomes, ['applied']);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), chain.slice(0, 256).map((e) => e.raw));
    assert.deepEqual((await h.client.hkeys('outbox.events:parked')).sort(), chain.slice(256).map((e) => `a:${e.seq}`).sort());
    await moveToProcessing(redis, LIST, 1000);
    assert.ok((await applyEvents(redis, LIST, chain.slice(0, 256), 60)).outcomes.every((o) => o === 'applied'));
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), chain.slice(256).map((e) => e.raw));
    assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    await moveToProcessing(redis, LIST, 1000);
    assert.ok((await applyEvents(redis, LIST, chain.slice(256), 60)).outcomes.every((o) => o === 'applied'));
    assert.equal(await guardOf(h.client, 'a'), '301');
    assert.equal(await h.client.hget('sum', 'a'), String((301 * 302) / 2));
    assert.deepEqual(await h.client.hgetall('outbox:stats'), { applied: '301', parked: '300', unparked: '300' });
    assert.equal(await h.client.llen(LIST), 0);
  });

  it('a corrupt entry inside a parked chain: the events before it are released, it goes to the dead letters, the ones after it stay parked', async () => {
    for (const seq of [2, 3, 5]) await apply([ev(`e${seq}`, 'a', seq)]);
    await h.client.hset('outbox.events:parked', 'a:4', 'not json');
    const r = await apply([ev('e1', 'a', 1)]);
    assert.deepEqual(r.outcomes, ['applied']);
    assert.match(r.problems.join('\n'), /a:4 was not valid JSON/);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), [ev('e2', 'a', 2).raw, ev('e3', 'a', 3).raw]);
    assert.deepEqual(await h.client.hkeys('outbox.events:parked'), ['a:5']);
    assert.equal(await h.client.llen('outbox.events:dead'), 1);
  });

  it('n, n+2, n+1 in one call: all three end applied (n+2 via the queue), none twice', async () => {
    const r = await apply([ev('e1', 'a', 1, [['hincrby', 'c', 'x', '1']]), ev('e3', 'a', 3, [['hincrby', 'c', 'x', '100']]), ev('e2', 'a', 2, [['hincrby', 'c', 'x', '10']])]);
    assert.deepEqual(r.outcomes, ['applied', 'parked', 'applied']);
    assert.equal(await h.client.hget('c', 'x'), '11');
    await moveToProcessing(redis, LIST, 10);
    assert.deepEqual((await applyEvents(redis, LIST, [ev('e3', 'a', 3, [['hincrby', 'c', 'x', '100']])], 60)).outcomes, ['applied']);
    assert.equal(await h.client.hget('c', 'x'), '111');
  });

  it('a parked event and its duplicate after the gap is filled in the same call: applied once, the released copy a duplicate', async () => {
    const r = await apply([ev('e2', 'a', 2, [['hincrby', 'c', 'x', '10']]), ev('e1', 'a', 1), ev('e2', 'a', 2, [['hincrby', 'c', 'x', '10']])]);
    assert.deepEqual(r.outcomes, ['parked', 'applied', 'applied']);
    assert.equal(await h.client.hget('c', 'x'), '10');
    await moveToProcessing(redis, LIST, 10);
    assert.deepEqual((await applyEvents(redis, LIST, [ev('e2', 'a', 2, [['hincrby', 'c', 'x', '10']])], 60)).outcomes, ['duplicate']);
    assert.equal(await h.client.hget('c', 'x'), '10');
    assert.equal(await h.client.hget('outbox:apply-count', 'e2'), '1');
    assert.equal(await h.client.llen(LIST), 0);
  });

  it('hset, hincrby, hdel, hincrby of one field across events: the final value is what the sequence gives', async () => {
    await h.client.hset('h', 'f', '7', 'g', 'keep');
    const r = await apply([
      ev('e1', 'a', 1, [['hincrby', 'h', 'f', '3']]),
      ev('e2', 'b', 1, [['hdel', 'h', 'f', '']]),
      ev('e3', 'a', 2, [['hincrby', 'h', 'f', '4'], ['hset', 'h', 'n', '1']]),
      ev('e4', 'b', 2, [['hdel', 'h', 'n', '']]),
    ]);
    assert.deepEqual(r.outcomes, ['applied', 'applied', 'applied', 'applied']);
    assert.deepEqual(await h.client.hgetall('h'), { f: '4', g: 'keep' });
  });

  it('set then hincrby on the same key in later event: the hincrby event is invalid (and left), nothing of it written', async () => {
    const r = await apply([ev('e1', 'a', 1, [['set', 'k', '', 'v']]), ev('e2', 'b', 1, [['sadd', 's', 'm', ''], ['hincrby', 'k', 'f', '1']])]);
    assert.deepEqual(r.outcomes, ['applied', 'invalid']);
    assert.equal(await h.client.get('k'), 'v');
    assert.equal(await h.client.exists('s'), 0);
    assert.deepEqual(await h.client.lrange(LIST, 0, -1), [ev('e2', 'b', 1).raw]);
    assert.equal(r.problems.length, 1);
  });

  it('an event refused after it touched a field another applied event changed leaves that event\'s value', async () => {
    const r = await apply([
      ev('e1', 'a', 1, [['hincrby', 'h', 'f', '3']]),
      ev('e2', 'b', 1, [['hincrby', 'h', 'f', '4'], ['hdel', 'h', 'g', ''], ['zincrby', 'h', 'm', '1']]),
      ev('e3', 'c', 1, [['hincrby', 'h', 'f', '10']]),
    ]);
    assert.deepEqual(r.outcomes, ['applied', 'invalid', 'applied']);
    assert.deepEqual(await h.client.hgetall('h'), { f: '13' });
  });

  it('hdel on a missing key, then set, sadd or zincrby on that key (one event or two): applied and acked, no error after the writes', async () => {
    const r = await apply([
      ev('e1', 'a', 1, [['hdel', 'k1', 'f', ''], ['set', 'k1', '', 'v']]),
      ev('e2', 'b', 1, [['hdel', 'k2', 'f', '']]),
      ev('e3', 'c', 1, [['sadd', 'k2', 'm', '']]),
      ev('e4', 'd', 1, [['hdel', 'k3', 'f', ''], ['zincrby', 'k3', 'm', '2']]),
    ]);
    assert.deepEqual(r.outcomes, ['applied', 'applied', 'applied', 'applied']);
    assert.equal(await h.client.get('k1'), 'v');
    assert.deepEqual(await h.client.smembers('k2'), ['m']);
    assert.equal(await h.client.zscore('k3', 'm'), '2');
    assert.equal(await h.client.llen(LIST), 0);
    assert.equal(await h.client.hget('outbox:stats', 'applied'), '4');
    assert.deepEqual((await h.client.smembers('outbox:effect-keys')).sort(), ['k1', 'k2', 'k3']);
  });
});

describe('through the real consumer', () => {
  it('one round where an event deletes a field of a missing hash and the next sets that key: both applied once, acked, counted, no problem', async () => {
    const events = defineEvents({
      Cleared: { aggregate: 'cart', payload: z.object({}) },
      Noted: { aggregate: 'note', payload: z.object({}) },
    });
    const handlers = defineRedisHandlers(events, { Cleared: () => [effect.hdel('cart:1', 'item')], Noted: () => [effect.set('cart:1', 'now a note')] });
    const message = (id: string, aggregate: string, type: string) =>
      JSON.stringify({ event_id: id, aggregate_id: aggregate, seq: 1, event_type: type, payload: {}, store_id: h.storeId });
    await h.client.rpush('outbox.events', message('c1', 'cart:1', 'Cleared'), message('n1', 'note:1', 'Noted'));
    const problems: string[] = [];
    const consumer = await createConsumer({ redis, handlers, consumerId: 'review', batchSize: 10, onProblem: (p) => problems.push(p) });
    const stats = await consumer.drain();
    await consumer.close();
    assert.deepEqual(problems, []);
    assert.equal(stats.applied, 2);
    assert.equal(await h.client.get('cart:1'), 'now a note');
    assert.deepEqual(await h.client.hgetall('outbox:stats'), { applied: '2' });
    assert.deepEqual(await h.client.smembers('outbox:effect-keys'), ['cart:1']);
    assert.deepEqual(await h.client.hgetall('outbox:apply-count'), { c1: '1', n1: '1' });
    assert.equal(await h.client.llen('outbox.events:processing:review'), 0);
  });
});

describe('bad state and bad input: refused before the first write', () => {
  it('an effect on a key of another type: that event invalid, Redis otherwise as the other events leave it', async () => {
    await h.client.set('str', 'x');
    await h.client.rpush(LIST, ev('e1', 'a', 1).raw);
    const before = await snapshot();
    const r = await applyEvents(redis, LIST, [ev('e1', 'a', 1, [['hset', 'ok', 'f', '1'], ['hincrby', 'str', 'f', '1']])], 60);
    assert.deepEqual(r.outcomes, ['invalid']);
    assert.deepEqual(await snapshot(), before);
  });

  it('processed hash, a guard bucket or the old applied-seq hash of another type: the call fails and Redis is unchanged', async () => {
    for (const key of ['processed', guardKeyOf('a'), 'outbox:applied-seq']) {
      await h.client.flushall();
      await h.client.hset('outbox:meta', 'store', h.storeId);
      await h.client.set(key, 'corrupt');
      await h.client.rpush(LIST, ev('e1', 'a', 1).raw, ev('e2', 'a', 2).raw);
      const before = await snapshot();
      await assert.rejects(applyEvents(redis, LIST, [ev('e1', 'a', 1, [['set', 'k', '', 'v']]), ev('e2', 'a', 2)], 60), /WRONGTYPE/);
      assert.deepEqual(await snapshot(), before, key);
    }
  });

  const projectKeyCases: [string, () => EventToApply[]][] = [
    ['outbox.events:parked', () => [ev('e3', 'a', 3), ev('e1', 'a', 1, [['set', 'k', '', 'v']])]],
    ['outbox:attempts', () => [ev('e1', 'a', 1, [['set', 'k', '', 'v']])]],
    ['outbox:effect-keys', () => [ev('e1', 'a', 1, [['set', 'k', '', 'v']])]],
    ['outbox.events:dead', () => [ev('e1', 'a', 1, [['set', 'k', '', 'v']]), { ...ev('f1', 'z', 1), storeId: 'other-store' }]],
    ['outbox.events', () => [ev('e2', 'a', 2), ev('e1', 'a', 1, [['set', 'k', '', 'v']])]],
  ];
  for (const [key, events] of projectKeyCases) {
    it(`${key} of another type: the call refused before the first write, Redis unchanged (not half-applied and left unacked)`, async () => {
      const setup = events();
      await h.client.set(key, 'corrupt');
      await h.client.rpush(LIST, ...setup.map((e) => e.raw));
      const before = await snapshot();
      await assert.rejects(applyEvents(redis, LIST, setup, 60), (e: Error) => e.message.startsWith('WRONGTYPE') && e.message.includes(key));
      assert.deepEqual(await snapshot(), before);
    });
  }

  it('malformed ARGV[4], a count that does not match the raw messages, a bad ttl: refused, Redis unchanged', async () => {
    await h.client.rpush(LIST, 'm');
    const before = await snapshot();
    const c = redis as unknown as { applyEvents: (...a: string[]) => Promise<unknown> };
    const keys = [LIST, 'processed', 'outbox:applied-seq', 'outbox.events:parked', 'outbox:stats', 'outbox.events', 'outbox:meta', 'outbox.events:dead', 'outbox:apply-count', 'outbox:attempts', 'outbox:effect-keys'];
    const row = JSON.stringify(['e1', 'a', '1', h.storeId, '{"ok":true}', '1', 'set', 'k', '', 'v']);
    for (const args of [
      ['outbox:seen:', '60', '', 'not json', 'm'],
      ['outbox:seen:', '60', '', row],
      ['outbox:seen:', '60', '', row, 'm', 'extra'],
      ['outbox:seen:', '1.5', '', row, 'm'],
      ['outbox:seen:', '-1', '', row, 'm'],
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', 1, h.storeId, '{}', '0']), 'm'],
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', '1', h.storeId, '{}', '1', 'set', 'k', '', 5]), 'm'],
      // the number of effects: not an integer, negative, more than the values that follow, fewer (the rest read as a second event)
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', '1', h.storeId, '{}', 'x']), 'm'],
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', '1', h.storeId, '{}', '-1']), 'm'],
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', '1', h.storeId, '{}', '2', 'set', 'k', '', 'v']), 'm'],
      ['outbox:seen:', '60', '', JSON.stringify(['e1', 'a', '1', h.storeId, '{}', '0', 'set', 'k', '', 'v']), 'm'],
      // the old shape, an array per event
      ['outbox:seen:', '60', '', JSON.stringify([['e1', 'a', '1', h.storeId, '{}', []]]), 'm'],
      ['outbox:seen:', '60', '', JSON.stringify({ a: 1 }), 'm'],
    ]) {
      await assert.rejects(c.applyEvents(...keys, ...args), /apply-events/, args.join(' '));
    }
    assert.deepEqual(await snapshot(), before);
  });

  it('an empty call changes nothing and leaves the processing list as it is', async () => {
    await h.client.rpush(LIST, 'x', 'y');
    const before = await snapshot();
    assert.deepEqual(await applyEvents(redis, LIST, [], 60), { outcomes: [], problems: [] });
    assert.deepEqual(await snapshot(), before);
  });

  it('values with odd unicode (lone surrogates, NUL, astral) and integers at the edge of 2^53: applied as sent or refused, never a failed call', async () => {
    const r = await apply([
      ev('e1', 'a', 1, [['hset', 'u', 'f', 'lone \ud800 \udfff'], ['hset', 'u', 'g', 'nul \u0000 end 😀'], ['hincrby', 'n', 'max', String(Number.MAX_SAFE_INTEGER)]]),
      ev('e2', 'b', 1, [['hincrby', 'n', 'max', '1']]),
      ev('e3', 'c', 1, [['hincrby', 'n', 'big', '9007199254740993']]),
      ev('e4', 'd', '9007199254740993'),
    ]);
    assert.deepEqual(r.outcomes, ['applied', 'invalid', 'invalid', 'invalid']);
    assert.deepEqual(await h.client.hgetall('u'), { f: 'lone \ufffd \ufffd', g: 'nul \u0000 end 😀' });
    assert.equal(await h.client.hget('n', 'max'), String(Number.MAX_SAFE_INTEGER));
  });

  it('a zincrby increment Lua reads as a number but Redis does not (whitespace, hex): refused in phase 1, never an error after writes', async () => {
    const r = await apply([ev('e1', 'a', 1, [['set', 'k', '', 'v']]), ev('e2', 'b', 1, [['zincrby', 'z', 'm', ' 5']]), ev('e3', 'c', 1, [['zincrby', 'z', 'm', '0x10']])]);
    assert.equal(r.outcomes[0], 'applied');
    for (const i of [1, 2]) {
      if (r.outcomes[i] === 'applied') continue; // Redis took it: fine, as long as the call completed
      assert.equal(r.outcomes[i], 'invalid');
    }
    assert.equal(await h.client.llen(LIST), r.outcomes.filter((o) => o === 'invalid').length);
  });
});

describe('database mode\'s claim and complete: bad state refused before the first write', () => {
  const OWNER = 'review';
  type Claimable = EventToClaim & { result: string };
  /** An event to claim and complete, of aggregate `agg` with `seq`, from `storeId`. */
  const ce = (id: string, agg: string, seq: number, storeId = h.storeId): Claimable => {
    const { raw, eventId, aggregate, result } = ev(id, agg, seq);
    return { raw: raw as string, eventId, storeId, aggregate, seq, result };
  };
  /** Puts the events' messages in the processing list and claims them in one call. */
  async function claim(events: Claimable[]) {
    await h.client.rpush(LIST, ...events.map((e) => e.raw));
    return claimEvents(redis, LIST, events, 60_000, OWNER);
  }

  // Each call has an event that writes (a claim marker, an applied seq) before the one that needs the key.
  const claimCases: [string, () => Claimable[]][] = [
    ['outbox.events:parked', () => [ce('e1', 'a', 1), ce('e3', 'b', 2)]],
    ['outbox:attempts', () => [ce('e1', 'a', 1), ce('e3', 'b', 2)]],
    ['outbox.events:dead', () => [ce('e1', 'a', 1), ce('f1', 'z', 1, 'other-store')]],
  ];
  for (const [key, events] of claimCases) {
    it(`claim: ${key} of another type refuses the call before its first write, Redis unchanged (no event acked and left unrecorded)`, async () => {
      const setup = events();
      await h.client.set(key, 'corrupt');
      await h.client.rpush(LIST, ...setup.map((e) => e.raw));
      const before = await snapshot();
      await assert.rejects(claimEvents(redis, LIST, setup, 60_000, OWNER), (e: Error) => e.message.startsWith('WRONGTYPE') && e.message.includes(key));
      assert.deepEqual(await snapshot(), before);
    });
  }

  it('claim: an apply-count hash of another type leaves the claims as they were and says why an event behind the seq guard was not checked for a taken seq', async () => {
    await setGuard(h.client, 'a', '1');
    await h.client.set('outbox:apply-count', 'corrupt');
    const r = await claim([ce('e1', 'a', 1), ce('e2', 'b', 1)]);
    assert.deepEqual(r.outcomes, ['duplicate', 'claimed']);
    assert.deepEqual(r.problems, ['outbox:apply-count is not a hash: a duplicate behind the seq guard could not be told from an event at a seq another event took']);
    assert.equal(await h.client.hexists('outbox:meta', 'takenEvent'), 0);
  });

  it('claim: a duplicate behind the seq guard never applied (no processed entry, apply count nor marker) is acked and recorded as taken; one with its apply count is not', async () => {
    await h.client.hset('outbox:applied-seq', 'a', '2', 'b', '1');
    await h.client.hset('outbox:apply-count', 'e1', '1');
    const r = await claim([ce('e1', 'a', 1), ce('x2', 'b', 1)]);
    assert.deepEqual(r.outcomes, ['duplicate', 'duplicate']);
    assert.equal(await h.client.llen(LIST), 0);
    assert.deepEqual(await h.client.hmget('outbox:meta', 'takenEvent', 'takenAggregate', 'takenSeq'), ['x2', 'b', '1']);
  });

  it('complete: an aggregate whose applied seq went back since the claim and whose marker is gone (Redis rebuilt meanwhile) is not jumped: the event is left in the processing list, and its redelivery waits behind the events before it; with its marker there it is recorded', async () => {
    await setGuard(h.client, 'a', '2');
    assert.deepEqual((await claim([ce('e3', 'a', 3)])).outcomes, ['claimed']);
    // Only the applied seq went back (its marker, the claim, still there): recorded, as before.
    await setGuard(h.client, 'a', '0');
    const kept = await completeEvents(redis, LIST, [ce('e3', 'a', 3)], 60);
    assert.deepEqual(kept.outcomes, ['applied']);
    assert.equal(await guardOf(h.client, 'a'), '3');
    await h.client.del('processed', 'outbox:apply-count');
    await h.client.rpush(LIST, ce('e3', 'a', 3).raw);
    // A rebuilt Redis: the claim's marker gone, the aggregate's applied seq back at 0, its events 1 and 2 delivered again.
    await h.client.del('outbox:seen:e3');
    await setGuard(h.client, 'a', '0');
    const r = await completeEvents(redis, LIST, [ce('e3', 'a', 3)], 60);
    assert.deepEqual(r.outcomes, ['invalid']);
    assert.deepEqual(r.problems, ['event e3 completed at seq 3 while outbox:applied-seq field a held 0: left in the processing list, to wait behind the events before it']);
    assert.equal(await guardOf(h.client, 'a'), '0');
    assert.equal(await h.client.hexists('processed', 'e3'), 0);
    assert.deepEqual(await h.client.lrange(LIST, 0, -1), [ce('e3', 'a', 3).raw]);
    // Its redelivery is parked; seqs 1 and 2 are claimed, not skipped (nor taken for events at a seq another took).
    await h.client.del(LIST);
    assert.deepEqual((await claim([ce('e3', 'a', 3)])).outcomes, ['parked']);
    assert.deepEqual((await claim([ce('e1', 'a', 1)])).outcomes, ['claimed']);
    assert.equal(await h.client.hexists('outbox:meta', 'takenEvent'), 0);
  });

  /** Claims the events, then completes them in one call (their messages still in the processing list). */
  async function claimed(events: Claimable[]) {
    const r = await claim(events);
    assert.ok(r.outcomes.every((o) => o === 'claimed'), r.outcomes.join());
    return events;
  }

  const completeCases: [string, () => Promise<Claimable[]>][] = [
    ['outbox.events:parked', () => claimed([ce('e1', 'a', 1), ce('e2', 'b', 1)])],
    ['outbox:attempts', () => claimed([ce('e1', 'a', 1), ce('e2', 'b', 1)])],
    ['outbox.events:dead', async () => [...(await claimed([ce('e1', 'a', 1)])), ce('f1', 'z', 1, 'other-store')]],
    [
      'outbox.events',
      async () => {
        // e2 parked behind e1: completing e1 re-queues it, at the head of outbox.events.
        await h.client.hset('outbox.events:parked', 'a:2', JSON.stringify({ reason: 'gap', message: ce('e2', 'a', 2).raw, parkedAt: 1 }));
        return claimed([ce('e0', 'b', 1), ce('e1', 'a', 1)]);
      },
    ],
  ];
  for (const [key, events] of completeCases) {
    it(`complete: ${key} of another type refuses the call before its first write, Redis unchanged (no event half-recorded)`, async () => {
      const setup = await events();
      const foreign = setup.filter((e) => e.storeId !== h.storeId);
      if (foreign.length) await h.client.rpush(LIST, ...foreign.map((e) => e.raw));
      await h.client.set(key, 'corrupt');
      const before = await snapshot();
      await assert.rejects(completeEvents(redis, LIST, setup, 60), (e: Error) => e.message.startsWith('WRONGTYPE') && e.message.includes(key));
      assert.deepEqual(await snapshot(), before);
    });
  }
});

describe('data faults', () => {
  it('marker gone but processed entry present (applied seq lost): duplicate, seq guard put back, no effect', async () => {
    await h.client.hset('processed', 'e5', '{}');
    const r = await apply([ev('e5', 'a', 5, [['hincrby', 'c', 'x', '1']]), ev('e4', 'a', 4, [['hincrby', 'c', 'x', '1']])]);
    assert.deepEqual(r.outcomes, ['duplicate', 'duplicate']);
    assert.equal(await h.client.exists('c'), 0);
    assert.equal(await guardOf(h.client, 'a'), '5');
  });

  it('processed entry gone but marker alive, for one event among new ones: only that one skipped', async () => {
    await h.client.set('outbox:seen:e2', '1');
    const r = await apply([ev('e1', 'a', 1, [['hincrby', 'c', 'x', '1']]), ev('e2', 'a', 2, [['hincrby', 'c', 'x', '10']]), ev('e3', 'b', 1, [['hincrby', 'c', 'x', '100']])]);
    assert.deepEqual(r.outcomes, ['applied', 'duplicate', 'applied']);
    assert.equal(await h.client.hget('c', 'x'), '101');
  });

  it('applied seq not an integer: that aggregate invalid with a problem, the others applied', async () => {
    await setGuard(h.client, 'a', 'x');
    const r = await apply([ev('e1', 'a', 1), ev('e2', 'b', 1)]);
    assert.deepEqual(r.outcomes, ['invalid', 'applied']);
    assert.match(r.problems.join('\n'), /field a holds "x"/);
  });

  it('apply-count hash corrupt (a non-integer count, or not a hash): events applied, the counts that can be kept kept, each failure reported', async () => {
    await h.client.hset('outbox:apply-count', 'e1', 'junk');
    let r = await apply([ev('e1', 'a', 1), ev('e2', 'b', 1)]);
    assert.deepEqual(r.outcomes, ['applied', 'applied']);
    assert.deepEqual(await h.client.hgetall('outbox:apply-count'), { e1: 'junk', e2: '1' });
    assert.equal(r.problems.length, 1);
    await h.client.del('outbox:apply-count');
    await h.client.set('outbox:apply-count', 'junk');
    r = await apply([ev('e3', 'a', 2), ev('e4', 'b', 2)]);
    assert.deepEqual(r.outcomes, ['applied', 'applied']);
    assert.equal(r.problems.length, 2);
    assert.equal(await h.client.llen(LIST), 0);
  });
});

describe('a held message set back (parked, dead-lettered, or behind a raised applied seq): a queue of another type refuses the call before its first write', () => {
  const envelope = JSON.stringify({ reason: 'gap', message: '{"event_id":"e2"}', parkedAt: 1 });
  const cases: [string, () => Promise<unknown>][] = [
    ['requeue-parked', () => requeueParked(redis, 'a:2')],
    ['requeue-dead-letter', () => requeueDeadLetter(redis, Buffer.from(envelope))],
    ['raise-applied-seq', () => raiseAppliedSeq(redis, 'a', 1)],
  ];
  for (const [script, call] of cases) {
    it(`${script}: the held entry stays where it was, Redis unchanged`, async () => {
      await h.client.hset('outbox.events:parked', 'a:2', envelope);
      await h.client.rpush('outbox.events:dead', envelope);
      await h.client.set('outbox.events', 'corrupt');
      const before = await snapshot();
      await assert.rejects(call(), (e: Error) => e.message.startsWith(`WRONGTYPE ${script}: outbox.events holds a string, not a list`));
      assert.deepEqual(await snapshot(), before);
    });
  }
});

describe('move-to-processing', () => {
  it('moves a round in order, the rest stays; a processing list or queue of another type: error, nothing moved', async () => {
    await h.client.rpush('outbox.events', 'a', 'not json {', 'c');
    assert.deepEqual((await moveToProcessing(redis, LIST, 2)).map(String), ['a', 'not json {']);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), ['c']);
    assert.deepEqual(await h.client.lrange(LIST, 0, -1), ['a', 'not json {']);
    await h.client.set('outbox.events:processing:other', 'x');
    await assert.rejects(moveToProcessing(redis, 'outbox.events:processing:other', 5), /WRONGTYPE/);
    assert.deepEqual(await h.client.lrange('outbox.events', 0, -1), ['c']);
    await h.client.del('outbox.events');
    await h.client.set('outbox.events', 'x');
    await assert.rejects(moveToProcessing(redis, LIST, 5), /WRONGTYPE/);
    assert.deepEqual(await h.client.lrange(LIST, 0, -1), ['a', 'not json {']);
  });

  it('a round larger than the queue and larger than the unpack slice moves everything, in order', async () => {
    const messages = Array.from({ length: 2500 }, (_, i) => `m${i}`);
    await h.client.rpush('outbox.events', ...messages);
    assert.equal((await moveToProcessing(redis, LIST, 5000)).length, 2500);
    assert.deepEqual(await h.client.lrange(LIST, 0, -1), messages);
    assert.equal(await h.client.exists('outbox.events'), 0);
  });
});
