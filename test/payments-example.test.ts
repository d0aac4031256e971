import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { connectRedis, createRelay } from '../shared/outbox/index.js';
import { useHarness } from './helpers/harness.js';
import { checkBalances, openPaymentsService, type PaymentsService } from './helpers/payments-example.js';
import { startScript, type CliResult } from './helpers/cli.js';

// The payments database is the store here (no `outbox init`): its first relay claims the Redis.
const h = useHarness({ init: false });
const CONSUME = fileURLToPath(new URL('../examples/payments/consume.js', import.meta.url));
const INIT_LEDGER = fileURLToPath(new URL('../examples/payments/init-ledger.js', import.meta.url));
const paymentsPath = () => join(h.env.dir, 'payments.db');
const ledgerPath = () => join(h.env.dir, 'ledger.db');

/** Drains into the ledger; the example's setup step (init-ledger.js) makes it first, once: the consumer never creates it (issue 30). */
async function consume(env: Record<string, string> = {}): Promise<CliResult> {
  if (!existsSync(ledgerPath())) assert.equal((await startScript(INIT_LEDGER, [ledgerPath()], {}).done).code, 0);
  return startScript(CONSUME, [ledgerPath()], { REDIS_URL: h.env.redisUrl, ...env }).done;
}

/** `count` captures over 12 accounts, every fourth refunded right after (so accounts hold several events close together). */
function traffic(service: PaymentsService, count: number, from = 0): number {
  let events = 0;
  for (let i = from; i < from + count; i += 1) {
    const id = service.capture(`acc-${i % 12}`, 100 + ((i * 37) % 900));
    events += 1;
    if (i % 4 === 0 && service.refund(id)) events += 1;
  }
  return events;
}

async function relay(service: PaymentsService): Promise<void> {
  const redis = await connectRedis(h.env.redisUrl);
  try {
    await createRelay(service.db, redis).relayAll();
  } finally {
    redis.disconnect();
  }
}

/** The balance invariant, and exactly one inbox row and one processed entry per event. */
async function assertBalanced(service: PaymentsService, events: number) {
  const ledger = new Database(ledgerPath(), { readonly: true, fileMustExist: true });
  try {
    const check = checkBalances(service.db, ledger);
    assert.deepEqual(check.mismatches, []);
    assert.equal(check.accounts, 12);
    assert.equal(check.entries, check.expectedEntries);
    assert.equal(check.entries, events);
    assert.equal(ledger.prepare('SELECT COUNT(*) FROM outbox_inbox').pluck().get(), events);
  } finally {
    ledger.close();
  }
  assert.equal(await h.client.hlen('processed'), events);
  assert.deepEqual([...new Set(await h.client.hvals('outbox:apply-count'))], ['1']);
  assert.equal(await h.client.llen('outbox.events:processing:payments'), 0);
  assert.equal(await h.client.llen('outbox.events:dead'), 0);
}

describe('examples/payments: payments → a ledger in the consumer’s own SQLite (database mode)', () => {
  it('every account’s ledger and balance equal its captured payments, after a consumer killed past its commit and traffic meanwhile', async () => {
    const service = openPaymentsService(paymentsPath());
    try {
      let events = traffic(service, 120);
      await relay(service);
      const crashed = await consume({ OUTBOX_CRASH_POINTS: 'consumer.after-commit', BATCH_SIZE: '25', LEASE_MS: '1000' });
      assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
      // Committed in the ledger, not recorded in Redis: the restart must not book them again.
      const ledger = new Database(ledgerPath(), { readonly: true });
      const committed = ledger.prepare('SELECT COUNT(*) FROM outbox_inbox').pluck().get() as number;
      ledger.close();
      assert.ok(committed > (await h.client.hlen('processed')));

      events += traffic(service, 60, 120);
      await relay(service);
      const done = await consume({ BATCH_SIZE: '25' });
      assert.equal(done.code, 0, done.stderr);
      await assertBalanced(service, events);
    } finally {
      service.close();
    }
  });

  it('a payload the declaration refuses is dead-lettered with the reason, the rest booked', async () => {
    const service = openPaymentsService(paymentsPath());
    try {
      const events = traffic(service, 12);
      await relay(service);
      const storeId = await h.client.hget('outbox:meta', 'store');
      const bad = { event_id: 'bad-1', aggregate_id: 'account:acc-x', seq: 1, event_type: 'PaymentCaptured', payload: { paymentId: 'p', amountCents: -5 }, store_id: storeId };
      await h.client.rpush('outbox.events', JSON.stringify(bad));
      const done = await consume();
      assert.equal(done.code, 0, done.stderr);
      const [dead] = (await h.client.lrange('outbox.events:dead', 0, -1)).map((entry) => JSON.parse(entry) as { reason: string });
      assert.match(dead.reason, /^PaymentCaptured payload: amountCents: /);
      await h.client.del('outbox.events:dead');
      await assertBalanced(service, events);
    } finally {
      service.close();
    }
  });
});
