import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { seededRandom } from '../../lab/random.js';
import { sleep } from '../../outbox/sleep.js';
import { Pm2, REPO_ROOT } from '../local/pm2.js';
import { RedisServer, testClient } from '../local/redis-server.js';
import { waitFor } from '../local/wait-for.js';
import { closeRedis, connectRedis } from '../../outbox/redis/connect.js';
import { verifyStores } from '../../operations/verify/verify.js';
import { sqliteVerifyReads } from '../../operations/verify/observe.js';
import { inboxChecks } from '../../operations/verify/inbox-checks.js';
import { loadCheckSet } from '../../operations/verify/load-check-set.js';

/**
 * examples/payments' own chaos run: its apps under pm2 (examples/payments/ecosystem.config.cjs:
 * producer traffic, two relays, two database-mode consumers sharing the ledger file) against a
 * private redis-server, with faults injected at random moments while traffic flows; then traffic
 * stops, the run waits until every event is applied, and reconciles the payments database, the
 * ledger and Redis. Run it: `node dist/shared/tooling/chaos/payments-chaos.js --duration 60s`
 * (after `npm run build`); test/payments-chaos.test.ts runs a short one.
 */

export const PAYMENTS_CRASH_POINTS = ['consumer.after-claim', 'consumer.after-commit', 'consumer.after-processed'] as const;
/** Every fault kind in turn, each at a random moment: a run of 8 faults or more hits each kind. */
const SCHEDULE = ['kill consumer', 'crash consumer.after-claim', 'kill relay', 'pause consumer', 'crash consumer.after-commit', 'kill consumer', 'crash consumer.after-processed', 'kill relay'] as const;
const NAMESPACE = 'payments';
const key = (name: string) => `${NAMESPACE}:${name}`;

export interface PaymentsChaosOptions {
  /** How long faults are injected while traffic flows (ms). */
  durationMs: number;
  /** Payment operations a second (captures and refunds). Default 150. */
  rate?: number;
  /** Mean time between faults (ms); each wait is drawn from 0.5x to 1.5x of it. Default 1500. */
  faultEveryMs?: number;
  /** The consumers' claim lease (ms): a pause lasts it plus a second. Default 1500. */
  leaseMs?: number;
  /** Seed of the fault moments and targets. Default 11. */
  seed?: number;
  /** How long the apps may take to apply every event once traffic stopped (ms). Default 30000 (60000 with consumerDbLoss). */
  drainTimeoutMs?: number;
  /**
   * Also the `consumer-db-loss` fault, once, halfway through: the ledger's files deleted under
   * traffic, then the repair an operator runs (stop the consumers, `outbox verify --repair
   * --consumer-db`, start them). Default false.
   */
  consumerDbLoss?: boolean;
  progress?: (line: string) => void;
}

export interface PaymentsChaosResult {
  /** Payment events in the payments database's outbox. */
  events: number;
  captures: number;
  refunds: number;
  /** Faults that took effect, by kind: "kill consumer", "kill relay", "pause consumer", "crash <point>", "consumer-db-loss". */
  faults: Record<string, number>;
  /** Crashes that fired at another point than the one armed. */
  misfired: number;
  /** Events without their inbox row or their ledger entry. */
  lost: number;
  /** Events applied more than once: apply count above 1, or more than one ledger entry. */
  twice: number;
  /** Inbox rows, ledger entries or processed entries of no event. */
  extra: number;
  /** Events processed without an inbox row, or with one and not processed. */
  processedNotInbox: number;
  /** Ledger entries committed after a later seq of their account. */
  outOfOrder: number;
  refundBeforeCapture: number;
  /** Accounts whose ledger sum or balance differs from their captured, unrefunded payments (checkBalances). */
  unbalanced: string[];
  deadLettered: number;
  parked: number;
  /** `outbox verify --consumer-db --checks` with the example's check set, in this process: the rows that failed (name: actual). */
  verifyFailed: string[];
  drainMs: number;
  ok: boolean;
}

/** verify on the drained system, as the example's README (examples/payments/README.md) runs it: the outbox's checks, the inbox and the example's check set. */
async function verifyPayments(payments: Database.Database, ledger: Database.Database, redisUrl: string): Promise<string[]> {
  const checks = await loadCheckSet(fileURLToPath(new URL('../../../examples/payments/verify-checks.js', import.meta.url)));
  const redis = await connectRedis(redisUrl, { namespace: NAMESPACE });
  try {
    const ledgerRows = await verifyStores(payments, redis, { checks, consumer: ledger });
    const rows = [...ledgerRows.checks, ...(await inboxChecks(ledger, redis, sqliteVerifyReads(payments)))];
    return rows.filter((c) => c.status === 'FAIL').map((c) => `${c.name}: ${c.actual}`);
  } finally {
    await closeRedis(redis);
  }
}

// The example is built by examples/tsconfig.json after the library: loaded at run time.
type CheckBalances = (payments: Database.Database, ledger: Database.Database) => { mismatches: string[] };
const loadCheckBalances = async () =>
  ((await import(new URL('../../../examples/payments/check-balances.js', import.meta.url).href)) as { checkBalances: CheckBalances }).checkBalances;

export async function runPaymentsChaos(options: PaymentsChaosOptions): Promise<PaymentsChaosResult> {
  const progress = options.progress ?? (() => {});
  const leaseMs = options.leaseMs ?? 1500;
  const faultEveryMs = options.faultEveryMs ?? 1500;
  const checkBalances = await loadCheckBalances();
  const random = seededRandom(options.seed ?? 11);
  const workspace = mkdtempSync(join(tmpdir(), 'payments-chaos-'));
  const dataDir = join(workspace, 'data');
  const crashLog = join(workspace, 'crash-points.log');
  const armFile = join(workspace, 'crash-arm');
  mkdirSync(dataDir);
  const redis = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always'], join(workspace, 'redis'));
  const client: Redis = testClient(redis.url);
  const pm2 = new Pm2({
    PAYMENTS_DIR: dataDir,
    PAYMENTS_NAMESPACE: NAMESPACE,
    REDIS_URL: redis.url,
    OUTBOX_LOG_DIR: join(workspace, 'logs'),
    PAYMENTS_RATE: String(options.rate ?? 150),
    // Few accounts: each holds many events close together, so order is tested hard.
    PAYMENTS_ACCOUNTS: '12',
    PAYMENTS_REFUND_SHARE: '0.3',
    PAYMENTS_LEASE_MS: String(leaseMs),
    PAYMENTS_BATCH_SIZE: '50',
    // Two consumers share the ledger file; two relays take over each other's job.
    PAYMENTS_CONSUMER_INSTANCES: '2',
    PAYMENTS_RELAY_INSTANCES: '2',
    OUTBOX_RELAY_LOCK: '2000ms',
    OUTBOX_CRASH_POINTS: PAYMENTS_CRASH_POINTS.join(','),
    OUTBOX_CRASH_MODE: 'armed',
    OUTBOX_CRASH_ARM_FILE: armFile,
    OUTBOX_CRASH_LOG: crashLog,
  });
  const faults: Record<string, number> = {};
  const count = (kind: string) => (faults[kind] = (faults[kind] ?? 0) + 1);
  const crashes = () => (existsSync(crashLog) ? readFileSync(crashLog, 'utf8').split('\n').filter(Boolean) : []);
  let misfired = 0;
  const ledgerPath = join(dataDir, 'ledger.db');
  try {
    // The example's setup step: the consumer never creates its ledger (issue 30).
    const init = spawnSync(process.execPath, ['dist/examples/payments/init-ledger.js', ledgerPath], { cwd: REPO_ROOT, encoding: 'utf8' });
    if (init.status !== 0) throw new Error(`init-ledger failed: ${init.stderr}`);
    const started = await pm2.run('start', 'examples/payments/ecosystem.config.cjs');
    if (started.code !== 0) throw new Error(`pm2 start failed: ${started.stderr || started.stdout}`);
    await waitFor(async () => (await pm2.list()).filter((p) => p.pm2_env.status === 'online').length === 5, { timeoutMs: 20_000, message: 'the payments apps did not come online' });
    // Traffic reaches the ledger before the first fault.
    await waitFor(async () => (await client.hlen(key('processed'))) > 0, { timeoutMs: 20_000, message: 'no payment event was booked' });

    // Up for a second at least: a process pm2 just started may not have its SIGUSR2 handler yet.
    const pick = async (name: string) => {
      const running = (await pm2.list()).filter(
        (p) => p.name === name && p.pm2_env.status === 'online' && p.pid && Date.now() - (p.pm2_env.pm_uptime ?? 0) > 1000,
      );
      return running.length === 0 ? undefined : running[Math.floor(random() * running.length)];
    };
    const faultsStarted = Date.now();
    let ledgerLost = !options.consumerDbLoss;
    for (let i = 0; Date.now() - faultsStarted < options.durationMs; i += 1) {
      await sleep(faultEveryMs * (0.5 + random()));
      if (!ledgerLost && Date.now() - faultsStarted >= options.durationMs / 2) {
        ledgerLost = true;
        await loseLedger(pm2, ledgerPath, { dataDir, redisUrl: redis.url, progress });
        count('consumer-db-loss');
        progress(`payments chaos ${Math.round((Date.now() - faultsStarted) / 1000)}s: consumer-db-loss, repaired, processed ${await client.hlen(key('processed'))}`);
        continue;
      }
      const fault = SCHEDULE[i % SCHEDULE.length];
      const target = await pick(fault.includes('relay') ? 'payments-relay' : 'payments-consumer');
      if (!target) continue;
      if (fault.startsWith('kill')) {
        process.kill(target.pid, 'SIGKILL');
        count(fault);
      } else if (fault === 'pause consumer') {
        // Past its claims' lease: what it claimed may be taken by another attempt meanwhile.
        process.kill(target.pid, 'SIGSTOP');
        await sleep(leaseMs + 1000);
        process.kill(target.pid, 'SIGCONT');
        count(fault);
      } else {
        // Armed for this point only: the consumer dies there with the next event that reaches it.
        const point = fault.slice('crash '.length);
        const before = crashes().length;
        writeFileSync(armFile, point);
        process.kill(target.pid, 'SIGUSR2');
        await waitFor(() => crashes().length > before, { timeoutMs: 10_000, message: `${fault} did not fire` });
        misfired += crashes()
          .slice(before)
          .filter((fired) => fired !== point).length;
      }
      progress(`payments chaos ${Math.round((Date.now() - faultsStarted) / 1000)}s: ${fault}, processed ${await client.hlen(key('processed'))}`);
    }

    // Traffic stops; every event the producer wrote must reach the ledger, once.
    progress('payments chaos: traffic stopped, draining');
    const stopped = await pm2.run('stop', 'payments-producer');
    if (stopped.code !== 0) throw new Error(`pm2 stop payments-producer failed: ${stopped.stderr}`);
    for (const point of crashes()) count(`crash ${point}`);
    const payments = new Database(join(dataDir, 'app.db'), { readonly: true, fileMustExist: true });
    const ledger = new Database(ledgerPath, { readonly: true, fileMustExist: true });
    try {
      const events = payments.prepare('SELECT event_id AS id FROM outbox').pluck().all() as string[];
      const drainStarted = Date.now();
      await waitFor(
        async () => {
          const [processed, queued, lists] = await Promise.all([client.hlen(key('processed')), client.llen(key('outbox.events')), client.keys(key('outbox.events:processing:*'))]);
          const inProcessing = lists.length === 0 ? 0 : (await Promise.all(lists.map((list) => client.llen(list)))).reduce((a, b) => a + b, 0);
          return processed >= events.length && queued === 0 && inProcessing === 0;
        },
        // The consumer-db-loss fault leaves the events applied before it to apply again: more time.
        { timeoutMs: options.drainTimeoutMs ?? (options.consumerDbLoss ? 60_000 : 30_000), intervalMs: 200, message: 'the consumers did not apply every event' },
      );
      const drainMs = Date.now() - drainStarted;

      const eventIds = new Set(events);
      const inbox = new Map((ledger.prepare('SELECT event_id, seq FROM outbox_inbox').all() as { event_id: string; seq: number }[]).map((r) => [r.event_id, r.seq]));
      const entries = ledger.prepare('SELECT rowid, entry_id, account, payment_id, amount_cents FROM ledger ORDER BY rowid').all() as {
        rowid: number;
        entry_id: string;
        account: string;
        payment_id: string;
        amount_cents: number;
      }[];
      const entryCount = new Map<string, number>();
      for (const e of entries) entryCount.set(e.entry_id, (entryCount.get(e.entry_id) ?? 0) + 1);
      const applyCounts = await client.hgetall(key('outbox:apply-count'));
      const processed = new Set(await client.hkeys(key('processed')));

      // Per-aggregate order: each account's entries, in the order they committed, follow its seq;
      // a refund is never booked before its capture.
      let outOfOrder = 0;
      let refundBeforeCapture = 0;
      const lastSeq = new Map<string, number>();
      const captured = new Set<string>();
      for (const e of entries) {
        const seq = inbox.get(e.entry_id) ?? 0;
        if (seq <= (lastSeq.get(e.account) ?? 0)) outOfOrder += 1;
        lastSeq.set(e.account, seq);
        if (e.amount_cents > 0) captured.add(e.payment_id);
        else if (!captured.has(e.payment_id)) refundBeforeCapture += 1;
      }
      const captures = payments.prepare('SELECT COUNT(*) FROM payments').pluck().get() as number;
      const result: PaymentsChaosResult = {
        events: events.length,
        captures,
        refunds: events.length - captures,
        faults,
        misfired,
        lost: events.filter((id) => !inbox.has(id) || !entryCount.has(id) || !processed.has(id)).length,
        twice: Object.values(applyCounts).filter((n) => Number(n) > 1).length + [...entryCount.values()].filter((n) => n > 1).length,
        extra: [...inbox.keys(), ...entryCount.keys(), ...processed].filter((id) => !eventIds.has(id)).length,
        processedNotInbox: [...processed].filter((id) => !inbox.has(id)).length + [...inbox.keys()].filter((id) => !processed.has(id)).length,
        outOfOrder,
        refundBeforeCapture,
        unbalanced: checkBalances(payments, ledger).mismatches,
        deadLettered: await client.llen(key('outbox.events:dead')),
        parked: await client.hlen(key('outbox.events:parked')),
        verifyFailed: await verifyPayments(payments, ledger, redis.url),
        drainMs,
        ok: false,
      };
      const zero = ['misfired', 'lost', 'twice', 'extra', 'processedNotInbox', 'outOfOrder', 'refundBeforeCapture', 'deadLettered', 'parked'] as const;
      result.ok = zero.every((name) => result[name] === 0) && result.unbalanced.length === 0 && result.verifyFailed.length === 0;
      return result;
    } finally {
      payments.close();
      ledger.close();
    }
  } finally {
    client.disconnect();
    await pm2.kill();
    await redis.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
}

/**
 * The consumer-db-loss fault: the ledger's files deleted under traffic (the consumers stop writing:
 * the file they opened is not the live one), then what an operator does: stop the consumers,
 * `outbox verify --repair --consumer-db` (it creates the ledger and republishes what Redis recorded
 * applied that it lacks), start them (they create the ledger's own tables and apply those events
 * again, each once, in order).
 */
async function loseLedger(pm2: Pm2, ledgerPath: string, { dataDir, redisUrl, progress }: { dataDir: string; redisUrl: string; progress: (line: string) => void }): Promise<void> {
  for (const suffix of ['', '-wal', '-shm']) rmSync(ledgerPath + suffix, { force: true });
  // Under traffic a while: the consumers take events and write none of them.
  await sleep(1000);
  const stopped = await pm2.run('stop', 'payments-consumer');
  if (stopped.code !== 0) throw new Error(`pm2 stop payments-consumer failed: ${stopped.stderr}`);
  const env = { ...process.env, REDIS_URL: redisUrl, OUTBOX_DIR: dataDir, OUTBOX_NAMESPACE: NAMESPACE };
  const repair = spawnSync(process.execPath, ['dist/apps/cli/main.js', 'verify', '--repair', '--yes', '--settle', '0s', '--consumer-db', ledgerPath], { cwd: REPO_ROOT, env, encoding: 'utf8' });
  if (repair.status !== 0 || !/^repair: the consumer database lacked \d+ event/m.test(repair.stdout)) {
    throw new Error(`outbox verify --repair --consumer-db did not rebuild the ledger (exit ${repair.status}): ${repair.stdout}${repair.stderr}`);
  }
  progress(`payments chaos: ${repair.stdout.split('\n').find((line) => line.startsWith('repair: the consumer database lacked'))}`);
  const restarted = await pm2.run('restart', 'payments-consumer');
  if (restarted.code !== 0) throw new Error(`pm2 restart payments-consumer failed: ${restarted.stderr}`);
  await waitFor(async () => (await pm2.list()).filter((p) => p.name === 'payments-consumer' && p.pm2_env.status === 'online').length === 2, {
    timeoutMs: 20_000,
    message: 'the consumers did not come back after the repair',
  });
}

/** The figures as a few lines, for a person. */
export function formatPaymentsChaos(r: PaymentsChaosResult): string {
  const faults = Object.entries(r.faults)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([kind, n]) => `${kind} ${n}`)
    .join(', ');
  return [
    `events ${r.events} (captures ${r.captures}, refunds ${r.refunds}), all applied ${r.drainMs} ms after traffic stopped`,
    `faults: ${faults}`,
    `lost ${r.lost}, applied twice ${r.twice}, extra ${r.extra}, processed vs inbox ${r.processedNotInbox}, out of order ${r.outOfOrder}, refunds before capture ${r.refundBeforeCapture}, unbalanced accounts ${r.unbalanced.length}, dead-lettered ${r.deadLettered}, parked ${r.parked}`,
    r.verifyFailed.length === 0 ? 'outbox verify --checks (the example\'s check set): OK' : `outbox verify --checks (the example's check set) FAILED: ${r.verifyFailed.join('; ')}`,
    r.ok ? 'PAYMENTS CHAOS OK: every payment event booked exactly once, in order, every account balanced' : 'PAYMENTS CHAOS FAILED',
  ].join('\n');
}
