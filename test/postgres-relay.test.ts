import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { createConsumer, createPgOutbox, createPgRelay, type ConsumeStats } from '../shared/outbox/index.js';
import { connectRedis } from '../shared/outbox/redis/connect.js';
import { toMessage } from '../shared/outbox/store/events.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startScript, type StartedCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { usePostgres } from './helpers/postgres.js';
import { tempDir } from './helpers/stores.js';
import { handlers as accountHandlers } from './fixtures/account-handlers.js';
import { depositEvents } from './fixtures/pg-accounts.js';
import { guardOf } from './helpers/guards.js';

const h = useHarness({ init: false });
const db = usePostgres();
const PRODUCE = fileURLToPath(new URL('./fixtures/pg-produce.js', import.meta.url));
const RELAY = fileURLToPath(new URL('./fixtures/pg-relay.js', import.meta.url));

beforeEach(() => db.reset());
/** The relays' connection: connectRedis registers the scripts (the harness's client is for assertions). */
let redis: Redis | undefined;
beforeEach(async () => {
  redis ??= await connectRedis(h.redis.url);
});
after(() => redis?.disconnect());

const deposit = (aggregateId: string) => ({ aggregateType: 'account' as const, aggregateId, type: 'Deposited' as const, payload: { amount: 1 } });
const queue = () => h.client.lrange('outbox.events', 0, -1);
const pending = () => db.scalar<number>("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'");

/** The existing consumer (createConsumer with the accounts' handlers) drains the queue. */
async function drain(): Promise<ConsumeStats> {
  const connection = await connectRedis(h.redis.url);
  try {
    const consumer = await createConsumer({ redis: connection, handlers: accountHandlers, consumerId: 'accounts', batchSize: 50 });
    const stats = await consumer.drain();
    await consumer.close();
    return stats;
  } finally {
    connection.disconnect();
  }
}

/**
 * Every stored event was applied exactly once (its dedupe record, an apply count of 1, its effect
 * counted once in the balance), and within each aggregate in seq order (applyOrder rises with seq).
 */
async function assertAppliedOncePerSeq(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query<{ event_id: string; aggregate_id: string; seq: number }>('SELECT event_id, aggregate_id, seq::int FROM outbox ORDER BY aggregate_id, seq');
  const processed = await h.client.hgetall('processed');
  const applyCount = await h.client.hgetall('outbox:apply-count');
  assert.equal(Object.keys(processed).length, rows.length, 'one processed entry per event');
  assert.ok(Object.values(applyCount).every((n) => n === '1'), 'no event applied twice');
  const perAggregate = new Map<string, number[]>();
  for (const row of rows) {
    assert.equal(applyCount[row.event_id], '1', `${row.aggregate_id} seq ${row.seq} applied once`);
    const order = (JSON.parse(processed[row.event_id]) as { applyOrder: number }).applyOrder;
    perAggregate.set(row.aggregate_id, [...(perAggregate.get(row.aggregate_id) ?? []), order]);
  }
  const balances = await h.client.hgetall('balances');
  for (const [aggregate, orders] of perAggregate) {
    assert.deepEqual(orders, [...orders].sort((a, b) => a - b), `${aggregate}: applied in seq order`);
    assert.equal(Number(balances[aggregate.slice('account:'.length)]), orders.length, `${aggregate}: each deposit counted once`);
    assert.equal(Number(await guardOf(h.client, aggregate)), orders.length);
  }
}

/** Starts a fixture and waits until it printed "ready". */
async function startReady(script: string, args: string[], env: Record<string, string> = {}): Promise<StartedCli> {
  const started = startScript(script, args, env);
  await waitFor(() => started.stdout().startsWith('ready\n') || started.child.exitCode !== null, { timeoutMs: 20_000, message: `${script} did not start` });
  assert.ok(started.stdout().startsWith('ready\n'), started.stderr());
  return started;
}

const output = (result: { stdout: string }) => JSON.parse(result.stdout.slice('ready\n'.length));

describe('PostgreSQL relay', () => {
  it('pushes messages in exactly the SQLite relay\'s wire form, marks them PUBLISHED, and the existing consumer applies them', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    for (const id of ['a', 'b', 'a']) await outbox.append(pool, deposit(id));
    const pairings: string[] = [];
    const relay = createPgRelay(pool, redis!, { batchSize: 2, onPairing: (p) => pairings.push(p.kind) });
    assert.deepEqual(await relay.relayAll(), { batches: 2, events: 3 });
    assert.deepEqual(pairings, ['claimed'], 'the first relay claims the fresh Redis for the store');

    const storeId = await db.scalar<string>("SELECT value FROM outbox_meta WHERE key = 'store_id'");
    const stored = (await pool.query('SELECT id::int, event_id, aggregate_id, seq::int, event_type, payload, created_at::float8 AS created_at, prev_created_at::float8 AS prev_created_at FROM outbox ORDER BY id')).rows;
    assert.deepEqual(await queue(), stored.map((row) => toMessage(row, storeId)), 'the same text toMessage makes for a SQLite row');
    assert.match((await queue())[2], /^\{"event_id":"[0-9a-f-]{36}","aggregate_id":"account:a","seq":2,"event_type":"Deposited","payload":\{"amount":1\},"store_id":"[0-9a-f]{16}","created_at":\d{13},"prev_created_at":\d{13}\}$/);
    assert.equal(await h.client.get('outbox:enqueued'), '3');
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PUBLISHED' AND published_at IS NOT NULL"), 3);
    assert.deepEqual(await relay.relayAll(), { batches: 0, events: 0 }, 'a second pass pushes nothing');

    const stats = await drain();
    assert.equal(stats.applied, 3);
    await assertAppliedOncePerSeq(pool);
  });

  it('4 relay processes beside 2 producer processes: every event pushed exactly once, each relay on its own rows; the consumer applies each once, in seq order', async () => {
    const pool = db.pool();
    await createPgOutbox(pool, { events: depositEvents });
    const dir = tempDir();
    const [go, stop] = [join(dir, 'go'), join(dir, 'stop')];
    const producers = await Promise.all([1, 2].map(() => startReady(PRODUCE, [db.url, '3', '80', '8', go])));
    const relays = await Promise.all([1, 2, 3, 4].map(() => startReady(RELAY, [db.url, h.redis.url, '10', go, stop])));
    writeFileSync(go, '');
    for (const p of producers) assert.equal((await p.done).code, 0, p.stderr());
    writeFileSync(stop, '');
    const relayed = [];
    for (const r of relays) {
      const result = await r.done;
      assert.equal(result.code, 0, result.stderr);
      relayed.push(output(result) as { batches: number; events: number });
    }
    const total = await db.scalar<number>('SELECT COUNT(*)::int FROM outbox');
    assert.ok(total > 500, `${total} events`);
    assert.equal(await pending(), 0);
    const messages = await queue();
    assert.equal(messages.length, total, 'each event pushed once: no relay pushed a row another one held');
    assert.equal(new Set(messages.map((m) => JSON.parse(m).event_id)).size, total);
    assert.equal(relayed.reduce((n, r) => n + r.events, 0), total);
    assert.ok(relayed.filter((r) => r.batches > 0).length >= 2, `relays ran side by side: ${JSON.stringify(relayed)}`);

    const stats = await drain();
    assert.equal(stats.applied, total);
    assert.equal(stats.duplicates, 0);
    await assertAppliedOncePerSeq(pool);
    process.stdout.write(`# 4 relays: ${JSON.stringify(relayed)}; ${total} events, ${stats.parked} parked by the consumer (pushed ahead of their seq)\n`);
  });

  it('the commit-order trap: a row whose transaction commits after higher ids were relayed, across several passes of 4 relays, is relayed once it commits', async () => {
    const pool = db.pool(12);
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    const relays = [1, 2, 3, 4].map(() => createPgRelay(pool, redis!, { batchSize: 5 }));
    const late = await pool.connect();
    let held: Awaited<ReturnType<typeof outbox.append>>;
    try {
      await late.query('BEGIN');
      held = await outbox.append(late, deposit('late'));
      const heldId = Number((await late.query('SELECT id FROM outbox WHERE event_id = $1', [held.eventId])).rows[0].id);
      // Every relay relays rows above the held one, pass after pass (a relay that had relayed
      // nothing yet would find the late row even with a "last id" cursor).
      for (let pass = 1; pass <= 3; pass += 1) {
        for (const relay of relays) {
          for (let i = 0; i < 5; i += 1) await outbox.append(pool, deposit(`early-${i % 3}`));
          assert.equal((await relay.relayAll()).events, 5);
        }
        for (let i = 0; i < 20; i += 1) await outbox.append(pool, deposit(`early-${i % 3}`));
        await Promise.all(relays.map((relay) => relay.relayAll()));
        assert.equal((await queue()).length, pass * 40, `pass ${pass}: every committed row relayed`);
        assert.ok(!(await queue()).some((m) => m.includes(held.eventId)), 'the uncommitted row is not pushed');
      }
      assert.ok(heldId < (await db.scalar<number>('SELECT MIN(id)::int FROM outbox')), 'its id is lower than every relayed one');
      await late.query('COMMIT');
    } finally {
      late.release();
    }
    await Promise.all(relays.map((relay) => relay.relayAll()));
    assert.equal(await pending(), 0, 'no relay skipped the late row');
    assert.equal((await queue()).length, 121);
    assert.ok((await queue())[120].includes(held.eventId), 'the late row, pushed last');
    assert.equal((await drain()).applied, 121);
    await assertAppliedOncePerSeq(pool);
  });

  it('rows a slow relay holds are skipped, so later seqs of their aggregate go ahead; the consumer parks those and applies all in seq order', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    for (let i = 0; i < 12; i += 1) await outbox.append(pool, deposit(`acc-${i % 3}`));
    // As a relay that claimed the first batch and has not pushed it yet: its rows locked.
    const slow = await pool.connect();
    try {
      await slow.query('BEGIN');
      await slow.query("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 3 FOR UPDATE");
      assert.deepEqual(await createPgRelay(pool, redis!, { batchSize: 4 }).relayAll(), { batches: 3, events: 9 }, 'the other relay takes the rest, not waiting');
      await slow.query('COMMIT');
    } finally {
      slow.release();
    }
    assert.deepEqual(await createPgRelay(pool, redis!).relayAll(), { batches: 1, events: 3 });
    const seqs = (await queue()).map((m) => JSON.parse(m)).filter((m) => m.aggregate_id === 'account:acc-0').map((m) => m.seq);
    assert.deepEqual(seqs, [2, 3, 4, 1], 'acc-0 reached the queue out of seq order');
    const stats = await drain();
    assert.equal(stats.applied, 12);
    assert.ok(stats.parked >= 3, `later seqs were parked: ${stats.parked}`);
    await assertAppliedOncePerSeq(pool);
  });

  for (const point of ['relay.after-push', 'relay.mid-batch'] as const) {
    it(`a relay process SIGKILLed at ${point} loses nothing: its batch stays PENDING, is pushed again, and the duplicate is absorbed`, async () => {
      const pool = db.pool();
      const outbox = await createPgOutbox(pool, { events: depositEvents });
      for (let i = 0; i < 50; i += 1) await outbox.append(pool, deposit(`acc-${i % 4}`));
      const go = join(tempDir(), 'go');
      writeFileSync(go, '');
      const killed = await startReady(RELAY, [db.url, h.redis.url, '10', go], { OUTBOX_CRASH_POINTS: point });
      const result = await killed.done;
      assert.equal(result.signal, 'SIGKILL', result.stderr);
      assert.equal((await queue()).length, 10, 'its first batch reached Redis');
      assert.equal(await pending(), 50, 'and none of it was marked');

      // PostgreSQL rolls the dead session back once it notices; until then its rows are held (skipped).
      const relay = createPgRelay(pool, redis!, { batchSize: 10 });
      await waitFor(async () => (await relay.relayAll(), (await pending()) === 0), { message: 'the killed relay\'s rows were never relayed' });
      assert.equal((await queue()).length, 60, 'its batch pushed twice');
      const stats = await drain();
      assert.equal(stats.applied, 50);
      assert.equal(stats.duplicates, 10);
      await assertAppliedOncePerSeq(pool);
    });
  }

  it('a relay stuck on Redis past its claim timeout loses its claim: PostgreSQL ends its session, the rows stay PENDING and another relay pushes them', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    for (let i = 0; i < 6; i += 1) await outbox.append(pool, deposit(`acc-${i % 2}`));
    const stuck = createPgRelay(pool, redis!, { claimTimeoutMs: 100 });
    await stuck.pair();
    // Redis holds every write (the push script included) for 1 s: the batch waits past its 100 ms.
    await h.client.client('PAUSE', 1000, 'WRITE');
    await assert.rejects(stuck.relayAll(), (error: Error) => {
      assert.match(error.message, /^cannot relay outbox rows in PostgreSQL: terminating connection due to idle-in-transaction timeout \(25P03\) \(the batch waited on Redis longer than the claim timeout, 100 ms: its rows stay PENDING\)$/);
      assert.doesNotMatch(error.message, /\n/);
      return true;
    });
    assert.equal(await pending(), 6, 'nothing marked');
    assert.equal((await queue()).length, 6, 'its push did reach Redis once Redis went on');
    assert.deepEqual(await createPgRelay(pool, redis!).relayAll(), { batches: 1, events: 6 }, 'no row is held any more');
    const stats = await drain();
    assert.deepEqual([stats.applied, stats.duplicates], [6, 6]);
    await assertAppliedOncePerSeq(pool);
  });

  it('rebuilds a Redis that lost its state: every PUBLISHED row back to PENDING, pushed and applied again', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    for (let i = 0; i < 12; i += 1) await outbox.append(pool, deposit(`acc-${i % 3}`));
    const pairings: unknown[] = [];
    const relay = createPgRelay(pool, redis!, { batchSize: 5, onPairing: (p) => pairings.push(p) });
    await relay.relayAll();
    assert.equal((await drain()).applied, 12);
    await h.client.flushall();
    for (let i = 0; i < 3; i += 1) await outbox.append(pool, deposit('acc-new'));
    assert.deepEqual(await relay.relayAll(), { batches: 3, events: 15 });
    assert.deepEqual(pairings, [{ kind: 'claimed' }, { kind: 'rebuilt', republished: 12, unrecoverable: 0, unrecoverableAggregates: 0 }]);
    assert.equal(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'replay_generation'"), '1');
    assert.equal((await drain()).applied, 15);
    await assertAppliedOncePerSeq(pool);
  });

  it('a database rolled back under its Redis (a dump restored: its last rows gone, its id sequence past them) is refused in one line: nothing pushed', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    for (const id of ['a', 'b', 'a']) await outbox.append(pool, deposit(id));
    const relay = createPgRelay(pool, redis!);
    await relay.relayAll();
    // What the backup will not hold: rows 4 and 5, account c's seqs 1 and 2, applied.
    for (const id of ['c', 'c']) await outbox.append(pool, deposit(id));
    await relay.relayAll();
    assert.equal((await drain()).applied, 5);
    // The restore, as a dump taken while rows 4 and 5 committed can hold it: rows 1-3, account c
    // unknown, but the ids' sequence already past them (pg_dump reads it outside its snapshot).
    await pool.query('DELETE FROM outbox WHERE id > 3');
    await pool.query("DELETE FROM outbox_aggregates WHERE aggregate_id = 'account:c'");
    // Account c's seq 1 again, as row 6: another event than the one Redis applied as c's seq 1.
    await outbox.append(pool, deposit('c'));
    const before = await queue();
    // The relay app pairs at every pass (pg-relay-loop.ts), a relay process when it starts.
    await assert.rejects(relay.pair(), { name: 'StoreBehindError' });
    await assert.rejects(createPgRelay(pool, redis!).relayAll(), (error: Error) => {
      assert.equal(error.name, 'StoreBehindError');
      assert.match(error.message, /^PostgreSQL database \S+ is behind Redis at \S+: Redis was pushed outbox row 5 as event \S+, and PostgreSQL database \S+ no longer holds it .*outbox verify --repair/);
      assert.equal(error.message.split('\n').length, 1);
      return true;
    });
    assert.deepEqual(await queue(), before, 'nothing pushed');
    assert.equal(await pending(), 1);
  });

  it('a relay whose outbox tables were recreated under it (a new store, Redis started over) relays the new rows as the new store\'s, never claiming Redis for the old one', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    await outbox.append(pool, deposit('acc-1'));
    const relay = createPgRelay(pool, redis!, { batchSize: 5 });
    await relay.relayAll();
    const oldStore = await db.scalar<string>("SELECT value FROM outbox_meta WHERE key = 'store_id'");
    // What `outbox init --force` does: new tables with a new store id, and Redis's keys deleted.
    await db.reset();
    const fresh = await createPgOutbox(pool, { events: depositEvents });
    await h.client.flushall();
    for (let i = 0; i < 3; i += 1) await fresh.append(pool, deposit('acc-2'));
    const newStore = await db.scalar<string>("SELECT value FROM outbox_meta WHERE key = 'store_id'");
    assert.notEqual(newStore, oldStore);
    assert.deepEqual(await relay.relayAll(), { batches: 1, events: 3 });
    assert.equal(await h.client.hget('outbox:meta', 'store'), newStore, 'Redis serves the new store');
    assert.deepEqual(new Set((await queue()).map((m) => (JSON.parse(m) as { store_id: string }).store_id)), new Set([newStore]));
    assert.equal((await drain()).applied, 3);
  });
});
