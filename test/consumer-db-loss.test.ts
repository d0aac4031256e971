import assert from 'node:assert/strict';
import { copyFileSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { connectRedis, createConsumer, createRelay, StoreUnavailableError } from '../shared/outbox/index.js';
import { planConsumerDbRebuild, rebuildConsumerDb, sqliteConsumerDbStore } from '../shared/operations/recovery/consumer-db.js';
import { sqliteRecovery, type RecoveryStore } from '../shared/operations/recovery/repair.js';
import { prune } from '../shared/operations/prune/prune.js';
import { useHarness } from './helpers/harness.js';
import { checkBalances, openPaymentsService, type PaymentsService } from './helpers/payments-example.js';
import { runCli, startScript, type CliResult } from './helpers/cli.js';

// Issue 30, item 3: a database-mode consumer's own database (the payments example's ledger) lost
// or replaced. The payments database is the store (<dir>/app.db, no `outbox init`).
const h = useHarness({ init: false });
const example = (file: string) => fileURLToPath(new URL(`../examples/payments/${file}`, import.meta.url));
const PAYMENTS_CHECKS = example('verify-checks.js');
const appDb = () => join(h.env.dir, 'app.db');
const ledgerPath = () => join(h.env.dir, 'ledger.db');

const initLedger = (): Promise<CliResult> => startScript(example('init-ledger.js'), [ledgerPath()], {}).done;
const consume = (): Promise<CliResult> => startScript(example('consume.js'), [ledgerPath()], { REDIS_URL: h.env.redisUrl, BATCH_SIZE: '25' }).done;
const verify = (...args: string[]) => runCli(['verify', '--settle', '0s', '--consumer-db', ledgerPath(), ...args], h.env);

/** `count` captures over 6 accounts, every third refunded right after; relayed. */
async function traffic(service: PaymentsService, count: number, from = 0): Promise<number> {
  let events = 0;
  for (let i = from; i < from + count; i += 1) {
    const id = service.capture(`acc-${i % 6}`, 100 + i);
    events += 1;
    if (i % 3 === 0 && service.refund(id)) events += 1;
  }
  const redis = await connectRedis(h.env.redisUrl);
  try {
    await createRelay(service.db, redis).relayAll();
  } finally {
    redis.disconnect();
  }
  return events;
}

async function drained(): Promise<void> {
  const done = await consume();
  assert.equal(done.code, 0, done.stderr);
}

const removeLedger = () => ['', '-wal', '-shm'].forEach((suffix) => rmSync(ledgerPath() + suffix, { force: true }));

/** 0 lost, 0 applied twice, 0 out of order: one inbox row and one ledger entry per event, apply counts 1, each account's entries in seq order. */
async function assertLedger(service: PaymentsService, events: number, { balanced = true } = {}) {
  const ledger = new Database(ledgerPath(), { readonly: true, fileMustExist: true });
  try {
    const inbox = new Map((ledger.prepare('SELECT event_id, seq FROM outbox_inbox').all() as { event_id: string; seq: number }[]).map((r) => [r.event_id, r.seq]));
    const held = service.db.prepare('SELECT event_id FROM outbox').pluck().all() as string[];
    assert.deepEqual(held.filter((id) => !inbox.has(id)), [], 'every event the store holds has its inbox row');
    const entries = ledger.prepare('SELECT entry_id, account FROM ledger ORDER BY rowid').all() as { entry_id: string; account: string }[];
    assert.equal(new Set(entries.map((e) => e.entry_id)).size, entries.length, 'one ledger entry per event');
    assert.equal(entries.length, events);
    const last = new Map<string, number>();
    for (const e of entries) {
      const seq = inbox.get(e.entry_id)!;
      assert.ok(seq > (last.get(e.account) ?? 0), `${e.account}: seq ${seq} booked after seq ${last.get(e.account)}`);
      last.set(e.account, seq);
    }
    if (balanced) assert.deepEqual(checkBalances(service.db, ledger).mismatches, []);
  } finally {
    ledger.close();
  }
  assert.deepEqual([...new Set(await h.client.hvals('outbox:apply-count'))], ['1'], 'no event applied twice');
  assert.equal(await h.client.llen('outbox.events:dead'), 0);
  assert.equal(await h.client.hlen('outbox.events:parked'), 0);
}

describe('a database-mode consumer whose own database is lost (issue 30)', () => {
  it('is never created by the consumer: the payments app refuses in one line (exit 78), consume.js too (exit 5), createConsumer too; init-ledger creates it once', async () => {
    const env = { REDIS_URL: h.env.redisUrl, OUTBOX_DIR: h.env.dir, OUTBOX_LOG_LEVEL: 'info' };
    const app = await startScript(example('consumer-app.js'), [], env).done;
    assert.equal(app.code, 78, app.stdout + app.stderr);
    assert.match(app.stderr, new RegExp(`^payments-consumer: no ledger at ${ledgerPath()}: the consumer never creates it; the first time, run "node dist/examples/payments/init-ledger.js .*"; if it was lost or replaced, stop the consumers, rebuild it from the store with "outbox verify --repair .*--consumer-db ${ledgerPath()}", then start them\\n$`));
    const drain = await consume();
    assert.equal(drain.code, 5);
    assert.match(drain.stderr, /^no ledger at .*: run "node dist\/examples\/payments\/init-ledger.js .*" the first time, or rebuild a lost one with "outbox verify --repair --consumer-db .*"\n$/);
    assert.equal(existsSync(ledgerPath()), false, 'nothing created the ledger');

    // The library: a missing path, and a connection to a database without the inbox, are refused.
    const redis = await connectRedis(h.env.redisUrl);
    try {
      const { ledgerHandlers } = (await import(new URL('../examples/payments/ledger.js', import.meta.url).href)) as { ledgerHandlers: Parameters<typeof createConsumer>[0]['handlers'] };
      await assert.rejects(createConsumer({ redis, handlers: ledgerHandlers, database: ledgerPath() }), (error: Error) => {
        assert.ok(error instanceof StoreUnavailableError);
        assert.match(error.message, /^no consumer database at .*ledger\.db: the consumer never creates it on its own: the first time, create it with createConsumerDatabase .*"outbox verify --repair --consumer-db .*ledger\.db"/);
        return true;
      });
      assert.equal(existsSync(ledgerPath()), false);
      const fresh = new Database(join(h.env.dir, 'other.db'));
      await assert.rejects(createConsumer({ redis, handlers: ledgerHandlers, database: fresh }), /has no inbox table \(outbox_inbox\): is it new, or a lost one recreated\?/);
      fresh.close();
    } finally {
      redis.disconnect();
    }

    const created = await initLedger();
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, `created ${ledgerPath()}\n`);
    const again = await initLedger();
    assert.equal(again.code, 4);
    assert.match(again.stderr, /^init-ledger: .*ledger\.db exists: it is not created again/);
    const service = openPaymentsService(appDb());
    try {
      const events = await traffic(service, 12);
      await drained();
      await assertLedger(service, events);
    } finally {
      service.close();
    }
  });

  it('deleted: verify names it missing; verify --repair creates it and republishes what Redis recorded applied, and the consumer books each event once, in order', async () => {
    const service = openPaymentsService(appDb());
    try {
      assert.equal((await initLedger()).code, 0);
      let events = await traffic(service, 60);
      await drained();
      removeLedger();
      const refused = await verify();
      assert.equal(refused.code, 5);
      assert.match(refused.stderr, /^outbox: no consumer database at .*ledger\.db \(--consumer-db\): if the database-mode consumer's file was lost, stop the consumers and rebuild it from the store with "outbox verify --repair --consumer-db .*ledger\.db"/);

      // Traffic while it is gone: queued, not applied.
      events += await traffic(service, 12, 60);
      const repaired = await verify('--repair');
      assert.equal(repaired.code, 0, repaired.stdout + repaired.stderr);
      assert.match(repaired.stdout, /^processed events without an inbox row \(effect missing from the consumer database\) +0 +\d+ +FAIL/m);
      assert.match(repaired.stdout, /^repair: created the consumer database .*ledger\.db/m);
      assert.match(repaired.stdout, /^repair: the consumer database lacked \d+ event\(s\) Redis recorded applied: forgot the records of \d+ event\(s\) of 6 aggregate\(s\) and republished them/m);
      assert.doesNotMatch(repaired.stdout, /no event is lost/);
      assert.ok(existsSync(ledgerPath()));

      await drained();
      await assertLedger(service, events);
      const ok = await verify('--checks', PAYMENTS_CHECKS);
      assert.equal(ok.code, 0, ok.stdout + ok.stderr);
      // Nothing left to do: a second repair changes nothing.
      const second = await verify('--repair');
      assert.equal(second.code, 0, second.stdout);
      assert.match(second.stdout, /^repair: no event is lost, nothing to republish$/m);
    } finally {
      service.close();
    }
  });

  it('replaced by an older copy, the repair interrupted after Redis forgot and run twice: every event booked once, in order', async () => {
    const service = openPaymentsService(appDb());
    try {
      assert.equal((await initLedger()).code, 0);
      let events = await traffic(service, 30);
      await drained();
      const older = join(h.env.dir, 'ledger-older.db');
      const ledger = new Database(ledgerPath());
      await ledger.backup(older);
      ledger.close();
      events += await traffic(service, 30, 30);
      await drained();
      removeLedger();
      copyFileSync(older, ledgerPath());

      // Interrupted: Redis forgot the events the older copy lacks, the republish never happened.
      const consumerDb = new Database(ledgerPath(), { readonly: true });
      const partitions = await connectRedis(h.env.redisUrl);
      try {
        const plan = await planConsumerDbRebuild(consumerDb, partitions, sqliteConsumerDbStore(service.db));
        assert.ok(plan.lacking > 0 && plan.events >= plan.lacking, JSON.stringify(plan));
        const dies: RecoveryStore = { ...sqliteRecovery(service.db), republish: async () => Promise.reject(new Error('interrupted')) };
        await assert.rejects(rebuildConsumerDb(partitions, dies, plan), /interrupted/);
      } finally {
        consumerDb.close();
        partitions.disconnect();
      }
      const first = await verify('--repair');
      assert.equal(first.code, 0, first.stdout + first.stderr);
      assert.match(first.stdout, /^repair: republished \d+ lost event\(s\)/m);
      // Run again before the consumer ran: the republished events are on their way, nothing is forgotten or republished twice.
      const second = await verify('--repair');
      assert.match(second.stdout, /^repair: no event is lost, nothing to republish$/m);
      await drained();
      await assertLedger(service, events);
      const ok = await verify('--checks', PAYMENTS_CHECKS);
      assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    } finally {
      service.close();
    }
  });

  it('events pruned from the store that the lost database held are named, never called "nothing lost"; the others are rebuilt', async () => {
    const service = openPaymentsService(appDb());
    try {
      assert.equal((await initLedger()).code, 0);
      const old = await traffic(service, 30);
      await drained();
      const oldThrough = service.db.prepare('SELECT MAX(id) FROM outbox').pluck().get() as number;
      const recent = await traffic(service, 30, 30);
      await drained();
      const redis = await connectRedis(h.env.redisUrl);
      try {
        // The first traffic's rows only (throughId), each applied.
        assert.equal((await prune(service.db, redis, 0, { throughId: oldThrough })).deleted, old);
      } finally {
        redis.disconnect();
      }
      const left = service.db.prepare('SELECT COUNT(*) FROM outbox').pluck().get() as number;
      assert.ok(left >= recent && left < old + recent, `prune left ${left} of ${old + recent}`);
      removeLedger();

      const repaired = await verify('--repair');
      assert.equal(repaired.code, 0, repaired.stdout + repaired.stderr);
      const lostToPrune = old + recent - left;
      assert.match(repaired.stdout, new RegExp(`^repair: ${lostToPrune} event\\(s\\) the consumer database lacks were pruned from SQLite: their effects cannot be rebuilt:\\n {2}[0-9a-f-]{36} \\(account:acc-\\d seq \\d+\\)`, 'm'));
      assert.doesNotMatch(repaired.stdout, /no event is lost/);
      await drained();
      await assertLedger(service, left, { balanced: false });
      const after = await verify();
      assert.equal(after.code, 1);
      assert.match(after.stdout, new RegExp(`^pruned events without an inbox row \\(effects lost\\) +0 +${lostToPrune} +FAIL`, 'm'));
    } finally {
      service.close();
    }
  });
});
