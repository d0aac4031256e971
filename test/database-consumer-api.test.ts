import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { createConsumer, createConsumerDatabase, defineDatabaseHandlers, defineEvents, defineRedisHandlers, ConfigError, StoreUnavailableError } from '../shared/outbox/index.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { createLogger } from '../shared/outbox/logger.js';
import { startHeartbeat } from '../shared/outbox/consumer/heartbeats.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { useHarness } from './helpers/harness.js';

const h = useHarness();
let redis: Redis;

const accountEvents = defineEvents({
  Deposited: { aggregate: 'account', payload: z.object({ amount: z.number().int().positive() }) },
  Withdrawn: { aggregate: 'account', payload: z.object({ amount: z.number().int().positive() }) },
});

/** A ledger in the consumer's own database: one entry per event, signed. */
const ledgerHandlers = defineDatabaseHandlers(accountEvents, {
  Deposited: (e, db) => void db.prepare('INSERT INTO ledger (account, seq, amount) VALUES (?, ?, ?)').run(e.aggregateId, e.seq, e.payload.amount),
  Withdrawn: (e, db) => void db.prepare('INSERT INTO ledger (account, seq, amount) VALUES (?, ?, ?)').run(e.aggregateId, e.seq, -e.payload.amount),
});

/** A message of account `account` as the relay pushes it. */
function message(account: number, seq: number, type: string, payload: object): string {
  return JSON.stringify({ event_id: `${account}-${seq}`, aggregate_id: `account:${account}`, seq, event_type: type, payload, store_id: h.storeId });
}

function consumerDb(): Database.Database {
  // Created once, as a setup step does: the consumer never creates it (issue 30).
  const path = join(h.env.dir, 'ledger.db');
  const db = existsSync(path) ? new Database(path) : createConsumerDatabase(path);
  db.exec('CREATE TABLE IF NOT EXISTS ledger (account TEXT NOT NULL, seq INTEGER NOT NULL, amount INTEGER NOT NULL)');
  return db;
}

function balances(db: Database.Database): Record<string, number> {
  const rows = db.prepare('SELECT account, SUM(amount) AS balance FROM ledger GROUP BY account').all() as { account: string; balance: number }[];
  return Object.fromEntries(rows.map((r) => [r.account, r.balance]));
}

describe('createConsumer with a database handler set (database mode)', () => {
  before(async () => (redis = await connectRedis(h.redis.url)));
  after(() => redis.disconnect());

  it('drains into the consumer’s own database once per event; a payload its schema refuses is dead-lettered', async () => {
    const db = consumerDb();
    await redis.rpush(
      'outbox.events',
      message(1, 1, 'Deposited', { amount: 10 }),
      message(2, 1, 'Deposited', { amount: 5 }),
      message(1, 2, 'Withdrawn', { amount: 3 }),
      message(1, 2, 'Withdrawn', { amount: 3 }),
      message(2, 2, 'Withdrawn', { amount: -1 }),
    );
    const consumer = await createConsumer({ redis, handlers: ledgerHandlers, database: db });
    const stats = await consumer.drain();
    await consumer.close();
    assert.deepEqual([stats.applied, stats.duplicates, stats.dead], [3, 1, 1]);
    assert.deepEqual(balances(db), { 1: 7, 2: 5 });
    assert.equal(db.prepare('SELECT COUNT(*) FROM outbox_inbox').pluck().get(), 3);
    const [dead] = (await redis.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry));
    assert.match(dead.reason, /^Withdrawn payload: amount: /);
    db.close();
  });

  it('start(): a long-running consumer applies events as they arrive and stops cleanly', async () => {
    const db = consumerDb();
    const consumer = await createConsumer({ redis, handlers: ledgerHandlers, database: join(h.env.dir, 'ledger.db'), consumerId: 'ledger' });
    const running = consumer.start({ log: createLogger('test', () => {}), connectBlocking: () => connectRedis(h.redis.url), statsIntervalMs: 0 });
    try {
      for (let seq = 1; seq <= 20; seq += 1) await redis.rpush('outbox.events', message(3, seq, 'Deposited', { amount: seq }));
      await waitFor(async () => (await redis.hlen('processed')) === 20, { message: 'the started consumer did not apply the 20 events' });
    } finally {
      await running.stop();
      await consumer.close();
    }
    assert.deepEqual(balances(db), { 3: 210 });
    assert.equal(await redis.llen('outbox.events:processing:ledger'), 0);
    db.close();
  });

  it('stops writing once its database file is deleted under it, and says why (issue 30)', async () => {
    const db = consumerDb();
    db.close();
    const path = join(h.env.dir, 'ledger.db');
    const lines: string[] = [];
    const consumer = await createConsumer({ redis, handlers: ledgerHandlers, database: path, consumerId: 'ledger' });
    const running = consumer.start({ log: createLogger('test', (line) => lines.push(line)), connectBlocking: () => connectRedis(h.redis.url), statsIntervalMs: 0 });
    try {
      await redis.rpush('outbox.events', message(4, 1, 'Deposited', { amount: 1 }));
      await waitFor(async () => (await redis.hlen('processed')) === 1, { message: 'the first event was not applied' });
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
      await redis.rpush('outbox.events', message(4, 2, 'Deposited', { amount: 2 }));
      await waitFor(() => lines.some((line) => /ledger\.db was deleted or replaced under the consumer: it writes no more/.test(line)), { message: lines.join('') });
      // Not recorded as applied into a file nobody will read: it waits in the processing list.
      assert.equal(await redis.hlen('processed'), 1);
      assert.equal(await redis.llen('outbox.events:processing:ledger'), 1);
    } finally {
      await running.stop();
      await consumer.close();
    }
  });

  it('refuses a database set without database, and database or leaseMs with a Redis set, with one line', async () => {
    await assert.rejects(createConsumer({ redis, handlers: ledgerHandlers }), (error: Error) => {
      assert.ok(error instanceof ConfigError);
      assert.equal(error.message, "createConsumer: a database handler set needs database: the consumer's own SQLite file (a path) or a better-sqlite3 connection");
      return true;
    });
    const redisSet = defineRedisHandlers(accountEvents, { Deposited: () => [], Withdrawn: () => [] });
    await assert.rejects(createConsumer({ redis, handlers: redisSet, database: 'x.db' }), /database and leaseMs are for a database handler set/);
    await assert.rejects(createConsumer({ redis, handlers: ledgerHandlers, database: 'x.db', leaseMs: 0 }), /leaseMs must be an integer from 1 to 86400000, got 0/);
    // A path with no file fails at createConsumer, in one line, before anything is taken: never created (issue 30).
    await assert.rejects(createConsumer({ redis, handlers: ledgerHandlers, database: join(h.env.dir, 'no-such-dir', 'ledger.db') }), (error: Error) => {
      assert.ok(error instanceof StoreUnavailableError);
      assert.match(error.message, /^no consumer database at .*no-such-dir\/ledger\.db: the consumer never creates it on its own: /);
      return true;
    });
  });
});

describe('createConsumer: stopping', () => {
  let own: Redis;
  before(async () => (own = await connectRedis(h.redis.url)));
  after(() => own.disconnect());

  it('stop() whose hand-back fails (the processing list made another type) still stops the heartbeat, so what stays there can be reclaimed', async () => {
    const handlers = defineRedisHandlers(accountEvents, { Deposited: () => [], Withdrawn: () => [] });
    const consumer = await createConsumer({ redis: own, handlers, consumerId: 'hb' });
    const running = consumer.start({ log: createLogger('test', () => {}), connectBlocking: () => connectRedis(h.redis.url), statsIntervalMs: 0 });
    await waitFor(async () => (await own.exists('outbox:consumer-alive:hb')) === 1, { message: 'no heartbeat' });
    await own.set('outbox.events:processing:hb', 'not a list');
    await assert.rejects(running.stop(), /WRONGTYPE/);
    await consumer.close();
    assert.equal(await own.exists('outbox:consumer-alive:hb'), 0, 'the heartbeat was left beating');
    await own.del('outbox.events:processing:hb');
  });

  it('a heartbeat under way when the consumer stops does not set it alive again after the stop', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The beat waits for its details (as the app's does for LLEN) while stop() runs.
    const stop = startHeartbeat(own, 'slow-beat', {
      details: async () => {
        await gate;
        return { applied: 0, lagMs: 0, queued: 0, health: null };
      },
    });
    const stopping = stop();
    release();
    await stopping;
    assert.equal(await own.exists('outbox:consumer-alive:slow-beat'), 0, 'alive after the stop');
    assert.ok(JSON.parse((await own.hget('outbox:consumers', 'slow-beat'))!).stoppedAt > 0);
  });
});
