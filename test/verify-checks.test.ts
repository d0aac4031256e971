import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { connectRedis, createRelay } from '../shared/outbox/index.js';
import { useHarness } from './helpers/harness.js';
import { openPaymentsService, type PaymentsService } from './helpers/payments-example.js';
import { runCli, startScript } from './helpers/cli.js';
import { snapshotStores, tempDir } from './helpers/stores.js';

// The payments service's database is the store (<dir>/app.db, no `outbox init`): verify must not need the lab's orders.
const h = useHarness({ init: false });
const CONSUME = fileURLToPath(new URL('../examples/payments/consume.js', import.meta.url));
const PAYMENTS_CHECKS = fileURLToPath(new URL('../examples/payments/verify-checks.js', import.meta.url));
const PUBLIC_API = new URL('../shared/outbox/index.js', import.meta.url).href;
const appDb = () => join(h.env.dir, 'app.db');
const ledgerPath = () => join(h.env.dir, 'ledger.db');

/** Captures over 6 accounts, every third refunded; relayed and drained into the ledger by the example's consumer. */
async function paymentsDrained(): Promise<number> {
  const service: PaymentsService = openPaymentsService(appDb());
  let events = 0;
  try {
    for (let i = 0; i < 30; i += 1) {
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
  } finally {
    service.close();
  }
  // The example's setup step makes the ledger once: the consumer never creates it (issue 30).
  assert.equal((await startScript(fileURLToPath(new URL('../examples/payments/init-ledger.js', import.meta.url)), [ledgerPath()], {}).done).code, 0);
  const consumed = await startScript(CONSUME, [ledgerPath()], { REDIS_URL: h.env.redisUrl }).done;
  assert.equal(consumed.code, 0, consumed.stderr);
  return events;
}

const verify = (...args: string[]) => runCli(['verify', '--settle', '0s', ...args], h.env);

/** A module file of its own, for the refusals. */
function moduleFile(source: string): string {
  const file = join(tempDir(), 'checks.mjs');
  writeFileSync(file, source);
  return file;
}

describe('verify --checks: a domain’s own invariants (examples/payments, database mode)', () => {
  it('a drained payments service verifies with its check set: the balance rows ok, no orders table needed, the module path relative to the current directory', async () => {
    const events = await paymentsDrained();
    const result = await verify('--consumer-db', ledgerPath(), '--checks', relative(process.cwd(), PAYMENTS_CHECKS));
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /accounts whose ledger or balance != captured payments +0 +0 +ok/);
    assert.match(result.stdout, new RegExp(`ledger entries = payment events +${events} +${events} +ok`));
    assert.match(result.stdout, /events lost \(never applied, not in Redis\) +0 +0 +ok/);
    assert.match(result.stdout, /processed events without an inbox row .* +0 +0 +ok/);
    assert.doesNotMatch(result.stdout, /orders|SKUs/);
    assert.match(result.stdout, /^VERIFY OK$/m);
    assert.equal(result.stderr, '');

    // Without --checks, a database that is not the lab's gets the outbox's own checks only.
    const generic = await verify('--consumer-db', ledgerPath());
    assert.equal(generic.code, 0, generic.stdout + generic.stderr);
    assert.doesNotMatch(generic.stdout, /orders|SKUs|ledger or balance/);
  });

  it('a ledger row changed by hand fails the balance check, naming the account; the outbox checks stay ok', async () => {
    await paymentsDrained();
    const ledger = new Database(ledgerPath());
    const account = ledger.prepare("SELECT account FROM ledger WHERE account = 'acc-2' LIMIT 1").pluck().get() as string;
    ledger.prepare('UPDATE ledger SET amount_cents = amount_cents + 1 WHERE entry_id = (SELECT entry_id FROM ledger WHERE account = ? LIMIT 1)').run(account);
    ledger.close();

    const result = await verify('--consumer-db', ledgerPath(), '--checks', PAYMENTS_CHECKS);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /accounts whose ledger or balance != captured payments +0 +1 +FAIL\n +e\.g\. acc-2: ledger \d+, balances \d+, payments say \d+/);
    assert.match(result.stdout, /^VERIFY FAILED: 1 invariant broken$/m);
    assert.match(result.stdout, /events applied more than once +0 +0 +ok/);
  });

  it('a check that throws fails its row and says which check and why on one line, without a stack; the other checks still run', async () => {
    await paymentsDrained();
    // The payments checks need the ledger: without --consumer-db their check throws.
    const noLedger = await verify('--checks', PAYMENTS_CHECKS);
    assert.equal(noLedger.code, 1, noLedger.stdout + noLedger.stderr);
    assert.equal(
      noLedger.stderr,
      'verify: check "accounts whose ledger or balance != captured payments" of payments threw: needs the ledger: pass --consumer-db <ledger.db>\noutbox: 1 invariant(s) failed\n',
    );
    assert.match(noLedger.stdout, /accounts whose ledger or balance != captured payments +a result +threw: needs the ledger: pass --consumer-db <ledger\.db> +FAIL/);
    assert.match(noLedger.stdout, /events lost \(never applied, not in Redis\) +0 +0 +ok/);

    const broken = moduleFile(
      "export default { name: 'mine', checks: { 'sums add up': () => { throw new TypeError('x is not iterable'); }, 'bad row': () => ({ name: 'n' }), 'fine': () => [] } };",
    );
    const result = await verify('--checks', broken);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stderr, /^verify: check "sums add up" of mine threw: x is not iterable$/m);
    assert.match(result.stderr, /^verify: check "bad row" of mine threw: its row's expected is not a string$/m);
    assert.doesNotMatch(result.stderr, /\bat .*:\d+:\d+/);
    assert.match(result.stdout, /^VERIFY FAILED: 2 invariants broken$/m);

    // A snapshot read that throws fails the set's one row for it; the checks that need it do not run.
    const badSnapshot = moduleFile(
      "export default { name: 'mine', snapshot: { producer: (db) => db.prepare('SELECT * FROM nowhere').all() }, checks: { 'uses it': ({ snapshot }) => [] } };",
    );
    const snapshot = await verify('--checks', badSnapshot);
    assert.equal(snapshot.code, 1, snapshot.stdout + snapshot.stderr);
    assert.match(snapshot.stderr, /^verify: check "mine: snapshot\.producer" of mine threw: no such table: nowhere$/m);
    assert.match(snapshot.stdout, /^VERIFY FAILED: 1 invariant broken$/m);
  });

  it('a missing module, one that does not load, and one without a check set: one line, exit 2, before any store is opened, nothing changed', async () => {
    await paymentsDrained();
    const before = await snapshotStores(h.env.dir, h.env.redisUrl);
    const cases: [string, RegExp][] = [
      ['no-such-checks.js', /^outbox: --checks no-such-checks\.js: no such file \(.*no-such-checks\.js\): pass a JS module whose default export is defineVerifyChecks\(\{ name, checks \}\) \(from 'outbox'\)\n$/],
      [moduleFile('export default {'), /^outbox: --checks .*checks\.mjs cannot be loaded \(Unexpected end of input\): pass a JS module /],
      [moduleFile('export const checks = {};'), /^outbox: --checks .*checks\.mjs has no default export: pass a JS module /],
      [moduleFile("export default { name: 'mine', checks: { a: 1 } };"), /^outbox: --checks .*checks\.mjs: its default export is not a check set \(mine: check "a" is not a function\): pass/],
      [moduleFile("export default { checks: {} };"), /^outbox: --checks .*checks\.mjs: its default export is not a check set \(its name must be a non-empty string\): pass/],
      [moduleFile("export default { name: 'mine', snapshot: { postgres: 1 }, checks: { a: () => [] } };"), /^outbox: --checks .*checks\.mjs: its default export is not a check set \(mine: snapshot\.postgres must be a function\): pass/],
      // A set whose snapshot reads PostgreSQL only: it would judge app.db without the snapshot its checks need.
      [
        moduleFile("export default { name: 'mine', snapshot: { postgres: async (client) => 1 }, checks: { a: () => [] } };"),
        /^outbox: --checks .*checks\.mjs: mine reads PostgreSQL in its snapshot \(snapshot\.postgres\) and has no snapshot\.producer for app\.db: add one to verify this store\n$/,
      ],
      // defineVerifyChecks itself refuses a malformed set when the module loads (ConfigError).
      [
        moduleFile(`import { defineVerifyChecks } from ${JSON.stringify(PUBLIC_API)}; export default defineVerifyChecks({ name: 'mine', checks: { a: 1 } });`),
        /^outbox: --checks .*checks\.mjs cannot be loaded \(defineVerifyChecks: mine: check "a" is not a function\): pass/,
      ],
    ];
    for (const [module, message] of cases) {
      const result = await verify('--consumer-db', ledgerPath(), '--checks', module);
      assert.equal(result.code, 2, `${module}: ${result.stdout}${result.stderr}`);
      assert.match(result.stderr, message);
      assert.equal(result.stderr.split('\n').length, 2, result.stderr);
      assert.equal(result.stdout, '');
    }
    assert.equal(await snapshotStores(h.env.dir, h.env.redisUrl), before);
    // Refused before the stores are opened: an unreachable Redis does not change the answer.
    const noRedis = await runCli(['verify', '--checks', 'no-such-checks.js'], { dir: h.env.dir, redisUrl: 'redis://127.0.0.1:1' });
    assert.equal(noRedis.code, 2, noRedis.stderr);
  });
});
