import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { createOutbox, defineEvents, InvalidEventError, InvalidInputError } from '../shared/outbox/index.js';
import { tempDir } from './helpers/stores.js';

/** A service of its own: accounts, with its own table and its own user_version. */
const accountEvents = defineEvents({
  AccountOpened: { aggregate: 'account', payload: z.object({ owner: z.string().min(1) }) },
  Deposited: { aggregate: 'account', payload: z.object({ amount: z.number().int().positive() }) },
  CardIssued: { aggregate: 'card', payload: z.object({ last4: z.string().regex(/^\d{4}$/) }) },
});

function userDatabase(): { db: Database.Database; path: string } {
  const path = join(tempDir(), 'bank.db');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 5000');
  db.exec('CREATE TABLE ledger (id INTEGER PRIMARY KEY, account TEXT NOT NULL, amount INTEGER NOT NULL); PRAGMA user_version = 17');
  return { db, path };
}

const rows = (db: Database.Database, sql: string) => db.prepare(sql).all();
const scalar = (db: Database.Database, sql: string) => db.prepare(sql).pluck().get();

/** Everything in the user's and the library's tables, to prove a refused append changed nothing. */
const snapshot = (db: Database.Database) =>
  JSON.stringify([rows(db, 'SELECT * FROM ledger'), rows(db, 'SELECT * FROM outbox'), rows(db, 'SELECT * FROM outbox_aggregates')]);

describe('createOutbox in a user database', () => {
  it('creates the library tables next to the user\'s own, leaving its tables and user_version alone, and again is a no-op', () => {
    const { db } = userDatabase();
    db.prepare('INSERT INTO ledger (account, amount) VALUES (?, ?)').run('acc-1', 5);
    createOutbox(db, { events: accountEvents });
    const tables = (rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") as { name: string }[]).map((t) => t.name);
    for (const name of ['ledger', 'outbox', 'outbox_aggregates', 'outbox_meta', 'outbox_pruned']) assert.ok(tables.includes(name), name);
    assert.equal(db.pragma('user_version', { simple: true }), 17);
    assert.deepEqual(rows(db, 'SELECT account, amount FROM ledger'), [{ account: 'acc-1', amount: 5 }]);
    assert.equal(scalar(db, "SELECT value FROM outbox_meta WHERE key = 'schema_version'"), '5');
    const storeId = scalar(db, "SELECT value FROM outbox_meta WHERE key = 'store_id'");
    assert.match(String(storeId), /^[0-9a-f]{16}$/);
    createOutbox(db, { events: accountEvents });
    assert.equal(scalar(db, "SELECT value FROM outbox_meta WHERE key = 'store_id'"), storeId, 'a second createOutbox keeps the store id');
    assert.equal(db.pragma('user_version', { simple: true }), 17);
  });

  it('refuses a database with a table named outbox that is not the library\'s, in one line, creating nothing', () => {
    const { db } = userDatabase();
    db.exec('CREATE TABLE outbox (id INTEGER PRIMARY KEY, note TEXT)');
    assert.throws(() => createOutbox(db, { events: accountEvents }), (error: Error) => {
      assert.match(error.message, /already has a table named outbox that is not the outbox's: rename it/);
      assert.doesNotMatch(error.message, /\n/);
      return true;
    });
    assert.equal(scalar(db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'outbox_meta'"), 0);
  });
});

describe('append', () => {
  it('inside the user\'s transaction: committed with the user\'s row, or neither when it throws (and the seq is not consumed)', () => {
    const { db } = userDatabase();
    const outbox = createOutbox(db, { events: accountEvents });
    const insertLedger = db.prepare('INSERT INTO ledger (account, amount) VALUES (?, ?)');
    const deposit = db.transaction((amount: number, fail: boolean) => {
      insertLedger.run('acc-1', amount);
      const appended = outbox.append({ aggregateType: 'account', aggregateId: 'acc-1', type: 'Deposited', payload: { amount } });
      if (fail) throw new Error('the service changed its mind');
      return appended;
    });

    const first = deposit(10, false);
    assert.equal(first.seq, 1);
    assert.equal(first.aggregate, 'account:acc-1');
    assert.deepEqual(rows(db, 'SELECT account, amount FROM ledger'), [{ account: 'acc-1', amount: 10 }]);
    assert.deepEqual(rows(db, 'SELECT event_id, aggregate_id, seq, event_type, payload, status FROM outbox'), [
      { event_id: first.eventId, aggregate_id: 'account:acc-1', seq: 1, event_type: 'Deposited', payload: '{"amount":10}', status: 'PENDING' },
    ]);

    assert.throws(() => deposit(20, true), /the service changed its mind/);
    assert.equal(scalar(db, 'SELECT COUNT(*) FROM ledger'), 1, 'the user\'s row is rolled back');
    assert.equal(scalar(db, 'SELECT COUNT(*) FROM outbox'), 1, 'the event is rolled back');
    assert.equal(scalar(db, "SELECT last_seq FROM outbox_aggregates WHERE aggregate_id = 'account:acc-1'"), 1, 'the seq is rolled back');

    assert.equal(deposit(30, false).seq, 2, 'the next commit takes the seq the rolled-back one did not keep');
  });

  it('numbers each aggregate\'s events 1, 2, 3, independently of other aggregates; a numeric id is its decimal text', () => {
    const { db } = userDatabase();
    const outbox = createOutbox(db, { events: accountEvents });
    const deposit = (aggregateId: string | number) => outbox.append({ aggregateType: 'account', aggregateId, type: 'Deposited', payload: { amount: 1 } });
    assert.deepEqual([deposit('a'), deposit('a'), deposit(7), deposit('a'), deposit(7), deposit('7')].map((e) => [e.aggregate, e.seq]), [
      ['account:a', 1],
      ['account:a', 2],
      ['account:7', 1],
      ['account:a', 3],
      ['account:7', 2],
      ['account:7', 3],
    ]);
    const card = outbox.append({ aggregateType: 'card', aggregateId: 'a', type: 'CardIssued', payload: { last4: '1234' } });
    assert.deepEqual([card.aggregate, card.seq], ['card:a', 1], 'another aggregate type with the same id is another aggregate');
  });

  it('outside a transaction commits on its own', () => {
    const { db, path } = userDatabase();
    const outbox = createOutbox(db, { events: accountEvents });
    assert.equal(db.inTransaction, false);
    const opened = outbox.append({ aggregateType: 'account', aggregateId: 'acc-9', type: 'AccountOpened', payload: { owner: 'Ada' } });
    assert.equal(db.inTransaction, false);
    const other = new Database(path, { readonly: true });
    try {
      assert.deepEqual(other.prepare('SELECT event_id, seq FROM outbox').all(), [{ event_id: opened.eventId, seq: 1 }], 'visible to another connection');
    } finally {
      other.close();
    }
  });

  it('refuses bad events with one line saying what is wrong, and leaves every table unchanged', () => {
    const { db } = userDatabase();
    const outbox = createOutbox(db, { events: accountEvents });
    outbox.append({ aggregateType: 'account', aggregateId: 'acc-1', type: 'Deposited', payload: { amount: 1 } });
    const before = snapshot(db);
    const append = outbox.append as (event: unknown) => unknown;
    const cases: [string, unknown, string][] = [
      ['bad payload', { aggregateType: 'account', aggregateId: 'acc-1', type: 'Deposited', payload: { amount: 0 } }, 'Deposited payload: amount: Too small: expected number to be >0'],
      ['payload not an object', { aggregateType: 'account', aggregateId: 'acc-1', type: 'Deposited', payload: 'ten' }, 'Deposited payload: Invalid input: expected object, received string'],
      ['unknown type', { aggregateType: 'account', aggregateId: 'acc-1', type: 'Withdrawn', payload: {} }, 'unknown event type "Withdrawn": declare it in defineEvents'],
      ['wrong aggregate type', { aggregateType: 'card', aggregateId: 'acc-1', type: 'Deposited', payload: { amount: 1 } }, 'Deposited belongs to aggregate "account", got "card"'],
      ['empty id', { aggregateType: 'account', aggregateId: '', type: 'Deposited', payload: { amount: 1 } }, 'aggregate id must be a positive integer or a non-empty string of at most 200 characters, got ""'],
      ['zero id', { aggregateType: 'account', aggregateId: 0, type: 'Deposited', payload: { amount: 1 } }, 'aggregate id must be a positive integer or a non-empty string of at most 200 characters, got 0'],
      ['fractional id', { aggregateType: 'account', aggregateId: 1.5, type: 'Deposited', payload: { amount: 1 } }, 'aggregate id must be a positive integer or a non-empty string of at most 200 characters, got 1.5'],
    ];
    for (const [what, event, message] of cases) {
      assert.throws(
        () => db.transaction(() => append(event))(),
        (error: Error) => {
          assert.ok(error instanceof InvalidEventError, `${what}: an InvalidEventError`);
          assert.ok(error instanceof InvalidInputError, `${what}: exit code 2 in the CLI`);
          assert.equal((error as InvalidEventError).exitCode, 2);
          assert.equal(error.message, message, what);
          return true;
        },
      );
      assert.equal(snapshot(db), before, `${what}: nothing written`);
    }
  });

  it('two processes appending to the same aggregate at once never get the same seq', async () => {
    const { db, path } = userDatabase();
    createOutbox(db, { events: accountEvents });
    db.close();
    const script = fileURLToPath(new URL('./fixtures/append-concurrently.js', import.meta.url));
    const goFile = join(tempDir(), 'go');
    const perProcess = 1000;
    const appenders = [0, 1].map((me) => {
      const child = spawn(process.execPath, [script, path, String(perProcess), goFile, String(me)], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      let markReady: () => void;
      const ready = new Promise<void>((resolve) => (markReady = resolve));
      child.stdout.on('data', (chunk) => {
        out += chunk;
        if (out.startsWith('ready\n')) markReady();
      });
      child.stderr.on('data', (chunk) => (err += chunk));
      const seqs = new Promise<number[]>((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out.slice('ready\n'.length)) as number[]) : reject(new Error(`appender exited ${code}: ${err}`))));
      });
      return { ready: Promise.race([ready, seqs.then(() => undefined)]), seqs };
    });
    await Promise.all(appenders.map((a) => a.ready));
    writeFileSync(goFile, '');
    const [a, b] = await Promise.all(appenders.map((x) => x.seqs));
    const all = [...a, ...b].sort((x, y) => x - y);
    assert.deepEqual(all, Array.from({ length: 2 * perProcess }, (_, i) => i + 1), 'every seq 1..2000 once');
    assert.ok(a.some((seq, i) => i > 0 && seq !== a[i - 1] + 1), 'the two processes interleaved (else this proves nothing)');
    const check = new Database(path, { readonly: true });
    try {
      assert.equal(check.prepare('SELECT COUNT(*) FROM ledger').pluck().get(), 2 * perProcess);
      assert.equal(check.prepare('SELECT COUNT(DISTINCT seq) FROM outbox WHERE aggregate_id = ?').pluck().get('account:acc-1'), 2 * perProcess);
      assert.equal(check.prepare('SELECT last_seq FROM outbox_aggregates').pluck().get(), 2 * perProcess);
    } finally {
      check.close();
    }
  });

  it('a second connection cannot append to the aggregate while the first holds its transaction, and gets the next seq after it commits', () => {
    const { db, path } = userDatabase();
    const first = createOutbox(db, { events: accountEvents });
    const other = new Database(path);
    other.pragma('busy_timeout = 50');
    const second = createOutbox(other, { events: accountEvents });
    const deposit = { aggregateType: 'account', aggregateId: 'acc-1', type: 'Deposited', payload: { amount: 1 } } as const;
    try {
      db.exec('BEGIN IMMEDIATE');
      assert.equal(first.append(deposit).seq, 1);
      assert.throws(() => second.append(deposit), /database is locked/);
      db.exec('COMMIT');
      assert.equal(second.append(deposit).seq, 2);
    } finally {
      other.close();
    }
  });
});

describe('defineEvents', () => {
  it('refuses declarations that are not ones, in one line', () => {
    assert.throws(() => defineEvents({}), /defineEvents needs at least one event type/);
    assert.throws(() => defineEvents({ Placed: { aggregate: 'or:der', payload: z.object({}) } }), /Placed: aggregate type must be 1-64 characters/);
    assert.throws(() => defineEvents({ Placed: { aggregate: 'order', payload: {} as z.ZodType } }), /Placed: payload must be a zod schema/);
    assert.throws(() => defineEvents({ 'bad name': { aggregate: 'order', payload: z.object({}) } }), /event type "bad name" must be 1-128 characters/);
  });

  it('deliver splits the key at its first ":" and checks the payload with the declaration', () => {
    const delivered = accountEvents.deliver({ eventId: 'e', storeId: 's', aggregateId: 'account:acc:7', seq: 3, type: 'Deposited', payload: { amount: 5 } });
    assert.deepEqual(delivered, { eventId: 'e', storeId: 's', aggregateType: 'account', aggregateId: 'acc:7', seq: 3, type: 'Deposited', payload: { amount: 5 } });
    assert.throws(() => accountEvents.deliver({ ...delivered, aggregateId: 'card:1', type: 'Deposited' }), /Deposited belongs to aggregate "account", got "card"/);
    assert.throws(() => accountEvents.deliver({ ...delivered, aggregateId: 'account:1', payload: { amount: -1 } }), /Deposited payload: amount: Too small/);
  });
});
