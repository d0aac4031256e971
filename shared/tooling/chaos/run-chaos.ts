import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { verifyStores, type Ledger } from '../../operations/verify/verify.js';
import { readWindow } from '../../outbox/redis/dedupe-window.js';
import { INVENTORY_CHECK, labVerifyChecks } from '../../lab/checks/verify-checks.js';
import { DEFAULT_MAX_ATTEMPTS } from '../../outbox/consumer/consumer.js';
import { HEARTBEAT_TTL_MS } from '../../outbox/consumer/heartbeats.js';
import { backoffMs } from '../../outbox/consumer/retries.js';
import { CRASH_POINTS } from '../../outbox/crash-point.js';
import { openDatabase, type Db } from '../../outbox/store/open-database.js';
import { createDatabase } from '../../lab/init-stores.js';
import { freePort, RedisServer } from '../local/redis-server.js';
import { Pm2 } from '../local/pm2.js';
import { waitFor } from '../local/wait-for.js';
import { seededRandom } from '../../lab/random.js';
import { closeRedis, connectRedis } from '../../outbox/redis/connect.js';
import { keys } from '../../outbox/redis/keys.js';
import { prune } from '../../operations/prune/prune.js';
import { sleep } from '../../outbox/sleep.js';
import { collectStatus } from '../../operations/status.js';
import { INCIDENT_SETTLE_MS, measureIncident, summarizeIncidents, type Incident, type IncidentSummary } from './incidents.js';
import type { ChaosTarget } from './targets.js';

/** The `prune` fault's `--older-than`: everything the consumer applied more than a second ago goes. */
const PRUNE_AGE_MS = 1000;

/** The relays' BullMQ job lock in a chaos run (OUTBOX_RELAY_LOCK): shorter than the default 4 s, to keep runs short. */
export const CHAOS_RELAY_LOCK_MS = 2000;
/** Relay processes: a paused or killed one is taken over by the other. */
const RELAY_INSTANCES = 2;
/** Longer than the relay lock: a paused relay loses its pass, a held app.db outlasts the relay's waits. */
const RELAY_OUTAGE_MS = CHAOS_RELAY_LOCK_MS + 1000;
/** Longer than the consumer heartbeat: a paused consumer counts as gone. */
const CONSUMER_PAUSE_MS = HEARTBEAT_TTL_MS + 1000;
/**
 * How long the `handler-fail` fault makes every handler attempt fail: shorter than the backoffs
 * between an event's first and last attempt (1.5 s at 5 attempts), so every event's last attempt
 * comes after it: transient failures, nothing dead-lettered.
 */
const HANDLER_FAIL_MS = Array.from({ length: DEFAULT_MAX_ATTEMPTS - 1 }, (_, i) => backoffMs(i + 1)).reduce((a, b) => a + b, 0) - 500;

export interface ChaosOptions {
  /** How long faults are injected while traffic runs (ms). */
  durationMs: number;
  /** Order operations per second (the producer's traffic generator). */
  rate: number;
  /** Mean time between faults (ms); each wait is drawn from 0.5x to 1.5x of it. */
  killEveryMs: number;
  targets: ChaosTarget[];
  /** Seed of the fault schedule and of the traffic. */
  seed: number;
  /** How long Redis stays down per fault (ms). Default 3000: "the broker wobbles for 3 seconds". */
  redisDownMs?: number;
  /** How long the system may take to drain after traffic stops (ms). Default 60000. */
  drainTimeoutMs?: number;
  /** Keep the workspace (data, logs, Redis files) instead of deleting it. */
  keep?: boolean;
  /** The consumer's dedupe window and aggregate horizon (ms): short ones expire records and drop guards during the faults. */
  dedupeWindowMs?: number;
  aggregateHorizonMs?: number;
  progress?: (line: string) => void;
}

export interface ChaosResult {
  seed: number;
  durationMs: number;
  rate: number;
  /**
   * Faults that took effect, by kind: "kill <app>", "crash <point>", "redis down", "redis wiped",
   * "prune", "pause relay", "pause consumer", "sqlite lock", "handler fail".
   */
  faults: Record<string, number>;
  /** The pauses and SQLite locks, each with the duplicates it caused. */
  incidents: Incident[];
  /** Their duplicates per kind: count, max and total. */
  duplicatesPerIncident: IncidentSummary;
  orders: number;
  outboxRows: number;
  /** Outbox rows the `prune` faults deleted. */
  pruned: number;
  /** Messages pushed, summed over every Redis the run had (a wiped Redis starts again at 0). */
  enqueued: number;
  processedUnique: number;
  /** Events whose records the dedupe window swept, and guards the aggregate horizon dropped, in the last Redis. */
  swept: number;
  droppedGuards: number;
  /** Summed over every Redis the run had, like `enqueued`. */
  duplicatesAbsorbed: number;
  /**
   * Events whose effect was applied more than once, by the per-event apply counts the apply script
   * keeps with the effect (`outbox:apply-count`), summed over every Redis the run had.
   */
  appliedTwice: number;
  /** Pruned events whose effects a later wipe lost for good (0: see `targetsAt`). */
  unrecoverable: number;
  lost: number;
  outOfOrder: number;
  inventoryMismatches: number;
  parked: number;
  deadLettered: number;
  maxPendingAgeMs: number;
  drainMs: number | null;
  ok: boolean;
  workspace: string;
  ledger: Ledger['checks'];
}

/** The corrupt-state fault: the lab's effect hash, where it waits meanwhile, and for how long. */
const LAB_EFFECT_KEY = 'inventory:reserved';
const CORRUPT_ASIDE = 'chaos:inventory-aside';
const CORRUPT_STATE_MS = 3000;

const APP_OF: Record<'relay' | 'consumer' | 'producer', string> = {
  relay: 'outbox-relay',
  consumer: 'outbox-consumer',
  producer: 'outbox-producer',
};

/**
 * The targets a fault may hit at this point of the run. A wipe after a prune loses the pruned
 * events' effects for good: that is the documented truth, not a fault of the system, and it would
 * leave the inventory wrong. So a run with both wipes Redis only in its first half and prunes only
 * in its second: every wipe is rebuilt from a complete outbox, and every prune is proven.
 */
function targetsAt(targets: ChaosTarget[], elapsedFraction: number): ChaosTarget[] {
  if (!targets.includes('redis-wipe') || !targets.includes('prune')) return targets;
  return targets.filter((target) => target !== (elapsedFraction < 0.5 ? 'prune' : 'redis-wipe'));
}

/** With both wipes and prunes targeted: the half's kind, while it has not happened yet in its half. */
function dueBothKinds(targets: ChaosTarget[], elapsedFraction: number, faults: Record<string, number>): ChaosTarget | undefined {
  if (!targets.includes('redis-wipe') || !targets.includes('prune')) return undefined;
  if (elapsedFraction < 0.5) return (faults['redis wiped'] ?? 0) === 0 ? 'redis-wipe' : undefined;
  return (faults.prune ?? 0) === 0 ? 'prune' : undefined;
}

/** The counters a wipe takes with it. */
interface RedisCounts {
  enqueued: number;
  duplicates: number;
  appliedTwice: number;
}

async function redisCounts(client: Redis): Promise<RedisCounts> {
  const [enqueued, stats, applyCounts] = await Promise.all([client.get(keys.enqueued), client.hgetall(keys.stats), client.hvals(keys.applyCount)]);
  return {
    enqueued: Number(enqueued ?? 0),
    duplicates: Number(stats.duplicates ?? 0),
    appliedTwice: applyCounts.filter((n) => Number(n) > 1).length,
  };
}

/**
 * Holds app.db's write lock on `db` for `ms`, taken at an instant when rows are PENDING (tried for
 * up to a second), so that the relay has rows it can push but not mark: the case its back-off is for.
 */
async function holdWriteLock(db: Db, ms: number): Promise<void> {
  const pending = db.prepare("SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'").pluck();
  for (let tries = 0; tries < 100; tries += 1) {
    db.exec('BEGIN IMMEDIATE');
    if ((pending.get() as number) > 0) break;
    db.exec('COMMIT');
    await sleep(10);
  }
  if (!db.inTransaction) db.exec('BEGIN IMMEDIATE');
  try {
    await sleep(ms);
  } finally {
    db.exec('COMMIT');
  }
}

/**
 * Runs the real apps under pm2 against a private, fully durable Redis (unless the `redis-wipe`
 * fault wipes it), generates traffic, injects seeded faults, then stops traffic, lets the system
 * drain and reconciles the stores.
 */
export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const progress = options.progress ?? (() => {});
  const random = seededRandom(options.seed);
  const workspace = mkdtempSync(join(tmpdir(), 'outbox-chaos-'));
  const dataDir = join(workspace, 'data');
  const crashLog = join(workspace, 'crash-points.log');
  const handlerFailFile = join(workspace, 'handler-fail');
  mkdirSync(join(workspace, 'redis'), { recursive: true });
  // What `outbox init` does: the apps never create app.db.
  createDatabase(dataDir);
  const redis = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always'], join(workspace, 'redis'));
  const port = await freePort();
  const pm2 = new Pm2({
    OUTBOX_DIR: dataDir,
    REDIS_URL: redis.url,
    PORT: String(port),
    OUTBOX_LOG_DIR: join(workspace, 'logs'),
    OUTBOX_RATE: String(options.rate),
    OUTBOX_SEED: String(options.seed),
    OUTBOX_CRASH_POINTS: CRASH_POINTS.join(','),
    OUTBOX_CRASH_MODE: 'armed',
    OUTBOX_CRASH_LOG: crashLog,
    OUTBOX_RELAY_INSTANCES: String(RELAY_INSTANCES),
    OUTBOX_RELAY_LOCK: `${CHAOS_RELAY_LOCK_MS}ms`,
    // The handler-fail fault's switch; the retry budget it is sized for.
    OUTBOX_HANDLER_FAIL: '',
    OUTBOX_HANDLER_FAIL_FILE: handlerFailFile,
    OUTBOX_MAX_ATTEMPTS: String(DEFAULT_MAX_ATTEMPTS),
    ...(options.dedupeWindowMs === undefined ? {} : { OUTBOX_DEDUPE_WINDOW: `${options.dedupeWindowMs}ms` }),
    ...(options.aggregateHorizonMs === undefined ? {} : { OUTBOX_AGGREGATE_HORIZON: `${options.aggregateHorizonMs}ms` }),
  });
  const faults: Record<string, number> = {};
  const count = (kind: string) => (faults[kind] = (faults[kind] ?? 0) + 1);
  // What the wiped Redises counted, each sampled just before its wipe.
  const wiped: RedisCounts = { enqueued: 0, duplicates: 0, appliedTwice: 0 };
  let prunedRows = 0;
  const incidents: Incident[] = [];
  let client: Redis | undefined;
  let db: Db | undefined;
  try {
    const started = await pm2.run('start', 'ecosystem.config.cjs');
    if (started.code !== 0) throw new Error(`pm2 start failed: ${started.stderr || started.stdout}`);
    await waitFor(async () => (await pm2.list()).filter((p) => p.pm2_env.status === 'online').length === 2 + RELAY_INSTANCES, {
      timeoutMs: 20_000,
      message: 'the apps did not come online',
    });
    db = openDatabase(dataDir);
    client = await connectRedis(redis.url, { reconnect: true, name: 'outbox-chaos' });

    let maxPendingAgeMs = 0;
    const startedAt = Date.now();
    /** An online process of `target`'s app, picked by the seed among its instances. */
    const pickProcess = async (target: keyof typeof APP_OF) => {
      const online = (await pm2.list()).filter((p) => p.name === APP_OF[target] && p.pm2_env.status === 'online' && p.pid);
      return online.length <= 1 ? online[0] : online[Math.floor(random() * online.length)];
    };
    /** Runs `fault`, measuring the duplicates it causes up to INCIDENT_SETTLE_MS after it. */
    const measured = async (kind: Incident['kind'], fault: () => Promise<void>) => {
      const done = await measureIncident(kind, Date.now() - startedAt, db!, client!, crashLog);
      await fault();
      count(kind);
      await sleep(INCIDENT_SETTLE_MS);
      incidents.push(await done());
    };
    const sample = async () => {
      const status = await collectStatus(db!, client!, undefined, { probeApps: false }).catch(() => undefined);
      if (!status) return;
      maxPendingAgeMs = Math.max(maxPendingAgeMs, status.oldestPendingAgeMs ?? 0);
      const injected = Object.values(faults).reduce((a, b) => a + b, 0);
      progress(
        `chaos ${Math.round((Date.now() - startedAt) / 1000)}s/${Math.round(options.durationMs / 1000)}s  faults ${injected}  ` +
          `outbox rows ${db!.prepare('SELECT COUNT(*) AS n FROM outbox').pluck().get()}  processed ${status.processed}  pending ${status.pending}  queued ${status.queued}`,
      );
    };
    const sampler = setInterval(() => void sample(), 1000);

    try {
      while (Date.now() - startedAt < options.durationMs) {
        await sleep(options.killEveryMs * (0.5 + random()));
        if (Date.now() - startedAt >= options.durationMs) break;
        const fraction = (Date.now() - startedAt) / options.durationMs;
        const pool = targetsAt(options.targets, fraction);
        const drawn = pool[Math.floor(random() * pool.length)];
        // A run with both kinds proves both: the first fault of each half is that half's kind (on a
        // loaded machine fewer faults fit in a run, and a draw could otherwise miss one).
        const due = dueBothKinds(options.targets, fraction, faults);
        const target = due ?? drawn;
        if (target === 'redis-wipe') {
          // Writes wait while the counters are read, so none is missed; the kill ends the pause.
          await client.call('CLIENT', 'PAUSE', '10000', 'WRITE');
          const counts = await redisCounts(client);
          await redis.wipe();
          wiped.enqueued += counts.enqueued;
          wiped.duplicates += counts.duplicates;
          wiped.appliedTwice += counts.appliedTwice;
          count('redis wiped');
          continue;
        }
        if (target === 'prune') {
          prunedRows += (await prune(db, client, PRUNE_AGE_MS)).deleted;
          count('prune');
          continue;
        }
        if (target === 'pause') {
          const app = random() < 0.5 ? 'relay' : 'consumer';
          const paused = await pickProcess(app);
          if (!paused) continue;
          await measured(`pause ${app}`, async () => {
            process.kill(paused.pid, 'SIGSTOP');
            try {
              await sleep(app === 'relay' ? RELAY_OUTAGE_MS : CONSUMER_PAUSE_MS);
            } finally {
              // Gone meanwhile (pm2 does not restart a stopped process, but anything may kill it): nothing to resume.
              try {
                process.kill(paused.pid, 'SIGCONT');
              } catch {}
            }
          });
          continue;
        }
        if (target === 'sqlite-lock') {
          await measured('sqlite lock', async () => {
            // Its own connection, like any other writer of app.db would have.
            const holder = openDatabase(dataDir);
            try {
              await holdWriteLock(holder, RELAY_OUTAGE_MS);
            } finally {
              holder.close();
            }
          });
          continue;
        }
        if (target === 'handler-fail') {
          // The consumer reads the file within 100 ms; the spec ends the failures itself, the delete tidies up.
          const kind = random() < 0.5 ? 'throw' : 'crash';
          writeFileSync(handlerFailFile, `${kind}-until:${Date.now() + HANDLER_FAIL_MS}`);
          count('handler fail');
          await sleep(HANDLER_FAIL_MS);
          rmSync(handlerFailFile, { force: true });
          continue;
        }
        if (target === 'corrupt-state') {
          // The lab's effect hash swapped for a string, atomically and back: events refused meanwhile
          // must be applied once it is right again, none lost or applied twice.
          await client.multi().rename(LAB_EFFECT_KEY, CORRUPT_ASIDE).set(LAB_EFFECT_KEY, 'corrupt').exec();
          count('corrupt state');
          await sleep(CORRUPT_STATE_MS);
          await client.multi().del(LAB_EFFECT_KEY).rename(CORRUPT_ASIDE, LAB_EFFECT_KEY).exec();
          continue;
        }
        if (target === 'redis') {
          await redis.stop(random() < 0.5 ? 'SIGKILL' : 'SIGTERM');
          count('redis down');
          await sleep(options.redisDownMs ?? 3000);
          await redis.resume();
          continue;
        }
        const app = await pickProcess(target);
        if (!app) continue;
        if (random() < 0.5) {
          process.kill(app.pid, 'SIGKILL');
          count(`kill ${target}`);
        } else {
          // Armed: the app dies at the next crash point it reaches (counted from the crash log).
          process.kill(app.pid, 'SIGUSR2');
        }
      }
    } finally {
      clearInterval(sampler);
    }

    progress('chaos: traffic stopped, draining');
    await pm2.run('stop', APP_OF.producer);
    const drainStarted = Date.now();
    let ledger = await verifyStores(db, client, { checks: labVerifyChecks });
    let drainMs: number | null = null;
    while (Date.now() - drainStarted < (options.drainTimeoutMs ?? 60_000)) {
      ledger = await verifyStores(db, client, { checks: labVerifyChecks });
      if (ledger.checks.every((c) => c.status !== 'FAIL')) {
        drainMs = Date.now() - drainStarted;
        break;
      }
      await sleep(500);
    }

    if (existsSync(crashLog)) {
      for (const point of readFileSync(crashLog, 'utf8').split('\n').filter(Boolean)) count(`crash ${point}`);
    }
    const last = await redisCounts(client);
    const appliedTwice = wiped.appliedTwice + last.appliedTwice;
    const f = ledger.figures;
    return {
      seed: options.seed,
      durationMs: options.durationMs,
      rate: options.rate,
      faults,
      incidents,
      duplicatesPerIncident: summarizeIncidents(incidents),
      orders: db.prepare('SELECT COUNT(*) FROM orders').pluck().get() as number,
      outboxRows: f.outbox,
      pruned: prunedRows,
      enqueued: wiped.enqueued + last.enqueued,
      processedUnique: f.processedUnique,
      swept: f.swept,
      droppedGuards: (await readWindow(client)).droppedGuards,
      duplicatesAbsorbed: wiped.duplicates + last.duplicates,
      appliedTwice,
      unrecoverable: f.unrecoverable,
      lost: f.lost,
      outOfOrder: f.outOfOrder,
      inventoryMismatches: Number(ledger.checks.find((c) => c.name === INVENTORY_CHECK)?.actual ?? NaN),
      parked: f.parked,
      deadLettered: f.deadLettered,
      maxPendingAgeMs,
      drainMs,
      ok: drainMs !== null && appliedTwice === 0,
      workspace,
      ledger: ledger.checks,
    };
  } finally {
    if (client) await closeRedis(client);
    db?.close();
    await pm2.kill();
    await redis.stop();
    if (!options.keep) rmSync(workspace, { recursive: true, force: true });
  }
}
