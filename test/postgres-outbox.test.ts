import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeEach, describe, it } from 'node:test';
import pg from 'pg';
import { createPgOutbox, InvalidEventError, StoreUnavailableError } from '../shared/outbox/index.js';
import { SCHEMA_VERSION } from '../shared/outbox/store/schema.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startScript } from './helpers/cli.js';
import { usePostgres } from './helpers/postgres.js';
import { tempDir } from './helpers/stores.js';
import { depositEvents } from './fixtures/pg-accounts.js';

const db = usePostgres();
const PRODUCE = fileURLToPath(new URL('./fixtures/pg-produce.js', import.meta.url));

beforeEach(() => db.reset());

const deposit = (aggregateId: string, amount = 1) => ({ aggregateType: 'account' as const, aggregateId, type: 'Deposited' as const, payload: { amount } });
const rows = async (pool: pg.Pool, sql: string) => (await pool.query(sql)).rows;

describe('PostgreSQL outbox tables', () => {
  it('are created next to the user\'s own tables with the library\'s schema version and a store id; again, even 4 at once, is a no-op', async () => {
    const pool = db.pool();
    await pool.query("INSERT INTO ledger (account, amount) VALUES ('acc-1', 5)");
    await Promise.all([1, 2, 3, 4].map(() => createPgOutbox(pool, { events: depositEvents })));
    const tables = (await rows(pool, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")).map((r) => r.table_name);
    assert.deepEqual(tables, ['ledger', 'outbox', 'outbox_aggregates', 'outbox_meta', 'outbox_pruned']);
    assert.equal(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'schema_version'"), String(SCHEMA_VERSION));
    const storeId = await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'");
    assert.match(String(storeId), /^[0-9a-f]{16}$/);
    await createPgOutbox(pool, { events: depositEvents });
    assert.equal(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'store_id'"), storeId, 'a later start keeps the store id');
    assert.deepEqual(await rows(pool, 'SELECT account, amount FROM ledger'), [{ account: 'acc-1', amount: '5' }]);
  });

  it('refuses a table named outbox that is not the library\'s, in one line, creating nothing', async () => {
    const pool = db.pool();
    await pool.query('CREATE TABLE outbox (id int PRIMARY KEY, note text)');
    await assert.rejects(createPgOutbox(pool, { events: depositEvents }), (error: Error) => {
      assert.ok(error instanceof StoreUnavailableError);
      assert.match(error.message, /^PostgreSQL database outbox_test_\w+ \(schema public\) already has a table named outbox that is not the outbox's: rename it/);
      assert.doesNotMatch(error.message, /\n/);
      return true;
    });
    assert.equal(await db.scalar("SELECT to_regclass('outbox_meta')::text"), null);
  });

  it('refuses outbox tables of another schema version, in one line', async () => {
    const pool = db.pool();
    await createPgOutbox(pool, { events: depositEvents });
    await pool.query("UPDATE outbox_meta SET value = '3' WHERE key = 'schema_version'");
    await assert.rejects(createPgOutbox(pool, { events: depositEvents }), /holds outbox tables of another version \(3, expected \d+\): drop them, or use another database$/);
  });

  it('upgrades outbox tables of version 4 in place: the next event carries its predecessor commit time', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    await outbox.append(pool, deposit('old'));
    await pool.query(`ALTER TABLE outbox DROP COLUMN prev_created_at;
      ALTER TABLE outbox_aggregates DROP COLUMN last_at, DROP COLUMN prev_at;
      UPDATE outbox_meta SET value = '4' WHERE key = 'schema_version'`);
    const upgraded = await createPgOutbox(pool, { events: depositEvents });
    assert.equal(await db.scalar("SELECT value FROM outbox_meta WHERE key = 'schema_version'"), String(SCHEMA_VERSION));
    const first = await db.scalar("SELECT created_at::text FROM outbox WHERE aggregate_id = 'account:old'");
    assert.equal(await db.scalar("SELECT prev_created_at::text FROM outbox WHERE aggregate_id = 'account:old'"), '0');
    await upgraded.append(pool, deposit('old'));
    assert.equal(await db.scalar("SELECT prev_created_at::text FROM outbox WHERE aggregate_id = 'account:old' AND seq = 2"), first);
  });

  it('fails in one line when PostgreSQL cannot be reached', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 2000 });
    try {
      await assert.rejects(createPgOutbox(pool, { events: depositEvents }), (error: Error) => {
        assert.ok(error instanceof StoreUnavailableError);
        assert.match(error.message, /^cannot create the outbox tables in PostgreSQL: .*ECONNREFUSED/);
        assert.doesNotMatch(error.message, /\n/);
        return true;
      });
    } finally {
      await pool.end();
    }
  });
});

describe('PostgreSQL append', () => {
  it('inside the user\'s transaction: committed with the user\'s row, or neither on ROLLBACK, and the seq is not consumed', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    const client = await pool.connect();
    try {
      const inTransaction = async (amount: number, commit: boolean) => {
        await client.query('BEGIN');
        await client.query('INSERT INTO ledger (account, amount) VALUES ($1, $2)', ['acc-1', amount]);
        const appended = await outbox.append(client, deposit('acc-1', amount));
        await client.query(commit ? 'COMMIT' : 'ROLLBACK');
        return appended;
      };
      const first = await inTransaction(10, true);
      assert.deepEqual([first.aggregate, first.seq], ['account:acc-1', 1]);
      assert.deepEqual(await rows(pool, 'SELECT event_id, aggregate_id, seq, event_type, payload, status FROM outbox'), [
        { event_id: first.eventId, aggregate_id: 'account:acc-1', seq: '1', event_type: 'Deposited', payload: '{"amount":10}', status: 'PENDING' },
      ]);
      assert.equal((await inTransaction(20, false)).seq, 2);
      assert.equal(await db.scalar('SELECT COUNT(*)::int FROM ledger'), 1, 'the user\'s row is rolled back');
      assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 1, 'the event is rolled back');
      assert.equal(await db.scalar("SELECT last_seq::int FROM outbox_aggregates WHERE aggregate_id = 'account:acc-1'"), 1, 'the seq is rolled back');
      assert.equal((await inTransaction(30, true)).seq, 2, 'the next commit takes the seq the rolled-back one did not keep');
    } finally {
      client.release();
    }
  });

  it('outside a transaction (on the pool) commits on its own; each aggregate counts 1, 2, 3 by itself', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    const seqs = [];
    for (const id of ['a', 'a', 'b', 'a', 'b']) seqs.push((await outbox.append(pool, deposit(id))).seq);
    assert.deepEqual(seqs, [1, 2, 1, 3, 2]);
    assert.equal(await db.scalar("SELECT COUNT(*)::int FROM outbox WHERE status = 'PENDING'"), 5);
  });

  it('refuses bad events with the same one-line errors as the SQLite outbox, writing nothing', async () => {
    const pool = db.pool();
    const outbox = await createPgOutbox(pool, { events: depositEvents });
    const bad = [
      [{ ...deposit('a'), type: 'Withdrawn' }, /^unknown event type "Withdrawn": declare it in defineEvents$/],
      [{ ...deposit('a'), aggregateType: 'card' }, /^Deposited belongs to aggregate "account", got "card"$/],
      [{ ...deposit('a'), payload: { amount: 1.5 } }, /^Deposited payload: amount: /],
      [{ ...deposit(''), aggregateId: -3 }, /^aggregate id must be a positive integer/],
    ] as const;
    for (const [event, message] of bad) {
      await assert.rejects(outbox.append(pool, event as never), (error: Error) => error instanceof InvalidEventError && message.test(error.message) && !error.message.includes('\n'));
    }
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox'), 0);
    assert.equal(await db.scalar('SELECT COUNT(*)::int FROM outbox_aggregates'), 0);
  });

  it('4 processes × 4 connections appending to the same 5 aggregates at once: seqs 1..n per aggregate, no gap, no repeat, in id order', async () => {
    const pool = db.pool();
    await createPgOutbox(pool, { events: depositEvents });
    const go = join(tempDir(), 'go');
    const producers = [1, 2, 3, 4].map(() => startScript(PRODUCE, [db.url, '4', '40', '5', go], {}));
    await waitFor(() => producers.every((p) => p.stdout().startsWith('ready\n')), { timeoutMs: 20_000, message: 'producers did not start' });
    writeFileSync(go, '');
    const results = await Promise.all(producers.map((p) => p.done));
    const committed: [string, number, string][] = [];
    let rolledBack = 0;
    for (const result of results) {
      assert.equal(result.code, 0, result.stderr);
      const out = JSON.parse(result.stdout.slice('ready\n'.length)) as { committed: [string, number, string][]; rolledBack: number };
      committed.push(...out.committed);
      rolledBack += out.rolledBack;
    }
    assert.equal(rolledBack, 4 * 4 * 8, 'every 5th of 40 transactions rolled back');

    const stored = (await rows(pool, 'SELECT aggregate_id, seq::int, event_id FROM outbox ORDER BY id')) as { aggregate_id: string; seq: number; event_id: string }[];
    assert.equal(stored.length, committed.length, 'exactly the committed appends are stored');
    const byAggregate = new Map<string, number[]>();
    for (const row of stored) byAggregate.set(row.aggregate_id, [...(byAggregate.get(row.aggregate_id) ?? []), row.seq]);
    assert.equal(byAggregate.size, 5);
    for (const [aggregate, seqs] of byAggregate) {
      assert.deepEqual(seqs, seqs.map((_, i) => i + 1), `${aggregate}: seqs 1..${seqs.length}, in id order`);
      assert.equal(await db.scalar('SELECT last_seq::int FROM outbox_aggregates WHERE aggregate_id = $1', [aggregate]), seqs.length);
    }
    const told = new Set(committed.map(([aggregate, seq, eventId]) => `${aggregate} ${seq} ${eventId}`));
    assert.deepEqual(new Set(stored.map((r) => `${r.aggregate_id} ${r.seq} ${r.event_id}`)), told, 'each producer was told the seq its row holds');
    assert.equal(await db.scalar('SELECT COALESCE(SUM(amount), 0)::int FROM ledger'), stored.length, 'the user\'s rows committed with exactly these events');
  });
});
