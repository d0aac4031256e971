import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { closeRedis, connectRedis } from '../shared/outbox/index.js';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { openPaymentsService } from './helpers/payments-example.js';

const h = useHarness({ init: false });
const PRODUCER = 'dist/examples/payments/producer-app.js';
const CONSUMER = 'dist/examples/payments/consumer-app.js';
const RELAY = 'dist/apps/relay/main.js';
const NAMESPACE = 'payments';
const key = (name: string) => `${NAMESPACE}:${name}`;

/** The `outbox verify --checks` line of examples/payments/README.md, run as written on `dir` (the apps' default data dir there). */
function readmeVerify(dir: string, redisUrl: string) {
  const readme = readFileSync(join(REPO_ROOT, 'examples/payments/README.md'), 'utf8');
  const line = readme.split('\n').find((l) => l.includes('npx outbox verify '));
  assert.ok(line, 'examples/payments/README.md has no "npx outbox verify" line');
  const args = line.replace(/^REDIS_URL=\S+ npx outbox /, '').replaceAll('~/outbox-payments', dir).split(' ');
  assert.ok(args.includes('--checks'), line);
  return spawnSync(process.execPath, ['dist/apps/cli/main.js', ...args], { cwd: REPO_ROOT, env: { ...process.env, REDIS_URL: redisUrl }, encoding: 'utf8' });
}

/** The app's whole output when it exits, asserting exit 78 and one line. */
async function refused(script: string, env: Record<string, string>): Promise<string> {
  const app = startApp(h.env, script, [], env);
  const { code } = await app.exited;
  const lines = app.output().trim().split('\n');
  assert.equal(code, 78, app.output());
  assert.equal(lines.length, 1, app.output());
  return lines[0];
}

describe('examples/payments apps (what examples/payments/ecosystem.config.cjs runs)', () => {
  it('refuse a bad setting in one line with exit code 78 (pm2 does not restart them)', async () => {
    assert.match(await refused(CONSUMER, { REDIS_URL: '' }), /^payments-consumer: REDIS_URL is not set: point it at your Redis/);
    assert.match(await refused(CONSUMER, { PAYMENTS_LEASE_MS: '0' }), /^payments-consumer: PAYMENTS_LEASE_MS must be a whole number from 1 to 86400000, got "0"$/);
    assert.match(await refused(CONSUMER, { OUTBOX_NAMESPACE: 'a b' }), /^payments-consumer: OUTBOX_NAMESPACE must be 1-64 letters/);
    assert.match(await refused(PRODUCER, { PAYMENTS_RATE: 'fast' }), /^payments-producer: PAYMENTS_RATE must be a number from 0.1 to 100000, got "fast"$/);
    assert.match(await refused(PRODUCER, { OUTBOX_LOG_LEVEL: 'loud' }), /^payments-producer: OUTBOX_LOG_LEVEL must be one of/);
  });

  it('the ecosystem file refuses to load without REDIS_URL, in one line', () => {
    const env: NodeJS.ProcessEnv = { ...process.env, PAYMENTS_DIR: join(h.env.dir, 'p') };
    delete env.REDIS_URL;
    const result = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(join(REPO_ROOT, 'examples/payments/ecosystem.config.cjs'))})`], { env, encoding: 'utf8' });
    assert.equal(result.status, 1);
    assert.match(result.stderr.trim(), /^payments: REDIS_URL is not set: point it at your Redis, e\.g\. REDIS_URL=redis:\/\/127\.0\.0\.1:6379$/);
  });

  it('the producer writes each payment and its event in one transaction, and stops cleanly on SIGTERM', async () => {
    const producer = startApp(h.env, PRODUCER, [], { PAYMENTS_RATE: '400', PAYMENTS_REFUND_SHARE: '0.3' });
    const path = join(h.env.dir, 'app.db');
    await waitFor(() => {
      try {
        const db = new Database(path, { readonly: true, fileMustExist: true });
        try {
          return (db.prepare('SELECT COUNT(*) FROM outbox').pluck().get() as number) >= 200;
        } finally {
          db.close();
        }
      } catch {
        return false;
      }
    }, { timeoutMs: 15_000, message: 'the producer wrote no events' });
    assert.deepEqual(await stopApp(producer), { code: 0, signal: null });
    assert.match(producer.output(), /"msg":"producer stopped","captures":\d+,"refunds":\d+/);
    const db = new Database(path, { readonly: true });
    try {
      const events = db.prepare("SELECT event_type, COUNT(*) AS n FROM outbox GROUP BY event_type ORDER BY event_type").all() as { event_type: string; n: number }[];
      const captured = db.prepare('SELECT COUNT(*) FROM payments').pluck().get() as number;
      const refunded = db.prepare("SELECT COUNT(*) FROM payments WHERE status = 'REFUNDED'").pluck().get() as number;
      assert.ok(refunded > 0);
      assert.deepEqual(events, [
        { event_type: 'PaymentCaptured', n: captured },
        { event_type: 'PaymentRefunded', n: refunded },
      ]);
    } finally {
      db.close();
    }
  });

  it('the relay app serves a service database without the lab’s tables, and still waits on a file that is not an outbox database', async () => {
    // A foreign file: refused (logged), nothing relayed, the relay waits for a valid one.
    const foreignDir = join(h.env.dir, 'foreign');
    mkdirSync(foreignDir);
    const foreign = new Database(join(foreignDir, 'app.db'));
    foreign.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY)');
    foreign.close();
    const waiting = startApp({ ...h.env, dir: foreignDir }, RELAY, [], { OUTBOX_NAMESPACE: NAMESPACE });
    await waitFor(() => /is not an outbox database/.test(waiting.output()), { timeoutMs: 15_000, message: 'the relay did not refuse the foreign file' });
    assert.deepEqual(await stopApp(waiting), { code: 0, signal: null });

    const service = openPaymentsService(join(h.env.dir, 'app.db'));
    try {
      for (let i = 0; i < 30; i += 1) service.capture(`acc-${i % 3}`, 100 + i);
      const relay = startApp(h.env, RELAY, [], { OUTBOX_NAMESPACE: NAMESPACE });
      const published = service.db.prepare("SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED'").pluck();
      await waitFor(async () => published.get() === 30 && (await h.client.llen(key('outbox.events'))) === 30, { timeoutMs: 15_000, message: 'the relay did not relay the payment events' });
      assert.deepEqual(await stopApp(relay), { code: 0, signal: null });
    } finally {
      service.close();
    }
  });

  it('the consumer books what is relayed into its ledger, long-running, and stops cleanly on SIGTERM handing nothing back twice', async () => {
    const service = openPaymentsService(join(h.env.dir, 'app.db'));
    const redis = await connectRedis(h.env.redisUrl, { namespace: NAMESPACE });
    const { createRelay } = await import('../shared/outbox/index.js');
    try {
      let events = 0;
      const traffic = async (n: number) => {
        for (let i = 0; i < n; i += 1) {
          const id = service.capture(`acc-${i % 5}`, 100 + i);
          events += 1;
          if (i % 3 === 0 && service.refund(id)) events += 1;
        }
        await createRelay(service.db, redis).relayAll();
      };
      await traffic(60);
      // The example's setup step makes the ledger once: the consumer never creates it (issue 30).
      const init = spawnSync(process.execPath, ['dist/examples/payments/init-ledger.js', join(h.env.dir, 'ledger.db')], { cwd: REPO_ROOT, encoding: 'utf8' });
      assert.equal(init.status, 0, init.stderr);
      const consumer = startApp(h.env, CONSUMER, [], { OUTBOX_NAMESPACE: NAMESPACE, PAYMENTS_BATCH_SIZE: '10' });
      await waitFor(async () => (await h.client.hlen(key('processed'))) === events, { timeoutMs: 15_000, message: 'the consumer did not book the events' });
      // Long-running: what arrives later is booked too.
      await traffic(40);
      await waitFor(async () => (await h.client.hlen(key('processed'))) === events, { timeoutMs: 15_000, message: 'the consumer did not book the later events' });
      assert.deepEqual(await stopApp(consumer), { code: 0, signal: null });
      assert.match(consumer.output(), /"msg":"consumer stopped"/);
      const ledger = new Database(join(h.env.dir, 'ledger.db'), { readonly: true });
      try {
        assert.equal(ledger.prepare('SELECT COUNT(*) FROM outbox_inbox').pluck().get(), events);
      } finally {
        ledger.close();
      }
      // The balance invariant, through outbox verify and the example's check set, as its README (examples/payments/README.md) runs it.
      const verify = readmeVerify(h.env.dir, h.env.redisUrl);
      assert.equal(verify.status, 0, verify.stdout + verify.stderr);
      assert.match(verify.stdout, /accounts whose ledger or balance != captured payments +0 +0 +ok/);
      assert.match(verify.stdout, new RegExp(`ledger entries = payment events +${events} +${events} +ok`));
      assert.match(verify.stdout, /processed events without an inbox row .* +0 +0 +ok/);
      assert.match(verify.stdout, /^VERIFY OK$/m);
      assert.equal(await h.client.llen(key('outbox.events:processing:payments-0')), 0);
    } finally {
      await closeRedis(redis);
      service.close();
    }
  });
});
