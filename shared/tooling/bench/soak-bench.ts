import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createDatabase } from '../../lab/init-stores.js';
import { labVerifyChecks } from '../../lab/checks/verify-checks.js';
import { verifyStores } from '../../operations/verify/verify.js';
import { connectRedis } from '../../outbox/redis/connect.js';
import { keys } from '../../outbox/redis/keys.js';
import { openDatabase } from '../../outbox/store/open-database.js';
import { Pm2 } from '../local/pm2.js';
import { freePort, RedisServer, testClient } from '../local/redis-server.js';
import { waitFor } from '../local/wait-for.js';
import { progress } from './progress.js';

export interface SoakOptions {
  /** Operations per second of the producer's traffic generator (every order a new aggregate). */
  rate: number;
  durationMs: number;
  windowMs: number;
  horizonMs: number;
  /** Rows pruned once older than this, every `pruneEveryMs`. */
  pruneAfterMs: number;
  pruneEveryMs: number;
  sampleEveryMs: number;
}

/** One look at everything that could grow, `atMs` after the traffic started. */
export interface SoakSample {
  atMs: number;
  redisBytes: number;
  outboxRows: number;
  /** The outbox table and its indexes (dbstat), and the WAL file. */
  outboxBytes: number;
  walBytes: number;
  /** The tables that keep a row per aggregate (outbox_aggregates, outbox_pruned) and their aggregates. */
  perAggregateBytes: number;
  aggregates: number;
  logBytes: number;
  /** Each app's resident memory (pm2's monit), bytes. */
  rss: Record<string, number>;
}

/** A series's mean over the second and over the last third of the run, and whether it stopped growing. */
export interface SoakGrowth {
  series: string;
  secondThird: number;
  lastThird: number;
  ratio: number;
  bounded: boolean;
}

export interface SoakFigures extends SoakOptions {
  events: number;
  samples: SoakSample[];
  growth: SoakGrowth[];
  verifyFailed: string[];
}

/** A series may grow this much from the second third of the run to the last, and count as bounded. */
const BOUNDED = 1.05;

/**
 * The apps under pm2 at a steady rate for `durationMs`, with a short dedupe window, aggregate
 * horizon and prune age, sampling every `sampleEveryMs` Redis's used_memory, the outbox rows,
 * app.db with its WAL, the log files and each app's RSS. Each should stop growing once the window,
 * the horizon and the prune age have passed. Then the traffic stops, the pipeline drains, and
 * verify judges the stores.
 */
export async function benchSoak(workspace: string, options: SoakOptions): Promise<SoakFigures> {
  const dataDir = join(workspace, 'soak');
  const logDir = join(workspace, 'soak-logs');
  const redis = await RedisServer.start([], join(workspace, 'soak-redis'));
  const client = testClient(redis.url);
  const seconds = (ms: number) => `${Math.round(ms)}ms`;
  const pm2 = new Pm2({
    OUTBOX_DIR: dataDir,
    REDIS_URL: redis.url,
    PORT: String(await freePort()),
    OUTBOX_LOG_DIR: logDir,
    // Small files and a stats line a second, so that the logs rotate within the run.
    OUTBOX_LOG_MAX_SIZE: '4KB',
    OUTBOX_LOG_RETAIN: '2',
    OUTBOX_STATS_EVERY: '1s',
    OUTBOX_RATE: String(options.rate),
    OUTBOX_DURATION: seconds(options.durationMs),
    OUTBOX_DEDUPE_WINDOW: seconds(options.windowMs),
    OUTBOX_AGGREGATE_HORIZON: seconds(options.horizonMs),
    OUTBOX_PRUNE_OLDER_THAN: seconds(options.pruneAfterMs),
    OUTBOX_PRUNE_EVERY: seconds(options.pruneEveryMs),
  });
  createDatabase(dataDir);
  const bar = progress(`soak: ${options.rate} operations/s under pm2`, options.durationMs);
  const samples: SoakSample[] = [];
  try {
    const started = await pm2.run('start', 'ecosystem.config.cjs');
    if (started.code !== 0) throw new Error(`pm2 start failed: ${started.stderr}`);
    await waitFor(async () => (await client.get(keys.enqueued)) !== null, { timeoutMs: 30_000, message: 'no event got through' });
    const begin = Date.now();
    for (let next = begin; next - begin <= options.durationMs; next += options.sampleEveryMs) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - Date.now())));
      samples.push(await sample(client, pm2, dataDir, logDir, Date.now() - begin));
      bar.set(Math.min(options.durationMs, Date.now() - begin));
    }
    bar.finish();
    const verifyFailed = await drainAndVerify(dataDir, redis.url, client);
    return { ...options, events: Number(await client.hget(keys.stats, 'applied')), samples, growth: growthOf(samples), verifyFailed };
  } finally {
    client.disconnect();
    await pm2.kill();
    await redis.destroy();
  }
}

async function sample(client: ReturnType<typeof testClient>, pm2: Pm2, dataDir: string, logDir: string, atMs: number): Promise<SoakSample> {
  const memory = await client.info('memory');
  const db = new Database(join(dataDir, 'app.db'), { readonly: true, fileMustExist: true });
  let outboxRows: number;
  let tables: { name: string; bytes: number }[];
  let aggregates: number;
  try {
    db.pragma('busy_timeout = 5000');
    outboxRows = db.prepare('SELECT COUNT(*) FROM outbox').pluck().get() as number;
    aggregates = db.prepare('SELECT COUNT(*) FROM outbox_aggregates').pluck().get() as number;
    tables = db.prepare<[], { name: string; bytes: number }>('SELECT name, SUM(pgsize) AS bytes FROM dbstat GROUP BY name').all();
  } finally {
    db.close();
  }
  const bytesOf = (names: RegExp) => tables.filter((t) => names.test(t.name)).reduce((sum, t) => sum + t.bytes, 0);
  const size = (file: string) => (existsSync(file) ? statSync(file).size : 0);
  const apps = (await pm2.list()) as { name: string; monit?: { memory?: number } }[];
  return {
    atMs,
    redisBytes: Number(/used_memory:(\d+)/.exec(memory)?.[1] ?? NaN),
    outboxRows,
    outboxBytes: bytesOf(/^(outbox|outbox_pending|sqlite_autoindex_outbox_\d)$/),
    walBytes: size(join(dataDir, 'app.db-wal')),
    perAggregateBytes: bytesOf(/^(outbox_aggregates|outbox_pruned|sqlite_autoindex_outbox_pruned_\d)$/),
    aggregates,
    logBytes: readdirSync(logDir).reduce((sum, file) => sum + size(join(logDir, file)), 0),
    rss: Object.fromEntries(apps.map((app) => [app.name, app.monit?.memory ?? 0])),
  };
}

/** Waits for the traffic's last event to be applied, then runs verify; resolves the names of the checks that failed. */
async function drainAndVerify(dataDir: string, redisUrl: string, client: ReturnType<typeof testClient>): Promise<string[]> {
  await waitFor(async () => (await client.llen(keys.events)) === 0, { timeoutMs: 60_000, message: 'the queue did not drain' });
  const redis = await connectRedis(redisUrl);
  const db = openDatabase(dataDir);
  try {
    const ledger = await verifyStores(db, redis, { checks: labVerifyChecks, settleMs: 10_000 });
    return ledger.checks.filter((check) => check.status === 'FAIL').map((check) => check.name);
  } finally {
    db.close();
    redis.disconnect();
  }
}

/** Each series's mean over the second third of the samples against the last third's (a mean: RSS saws with the GC). */
export function growthOf(samples: SoakSample[]): SoakGrowth[] {
  const third = Math.floor(samples.length / 3);
  const series: [string, (s: SoakSample) => number][] = [
    ['Redis used_memory', (s) => s.redisBytes],
    ['outbox rows', (s) => s.outboxRows],
    ['outbox table + indexes', (s) => s.outboxBytes],
    ['app.db WAL', (s) => s.walBytes],
    ['log files', (s) => s.logBytes],
    ...Object.keys(samples[0]?.rss ?? {}).map((app): [string, (s: SoakSample) => number] => [`${app} RSS`, (s) => s.rss[app] ?? 0]),
  ];
  return series.map(([name, value]) => {
    const mean = (part: SoakSample[]) => part.reduce((sum, s) => sum + value(s), 0) / part.length;
    const secondThird = mean(samples.slice(third, 2 * third));
    const lastThird = mean(samples.slice(2 * third));
    const ratio = lastThird / secondThird;
    return { series: name, secondThird, lastThird, ratio, bounded: ratio <= BOUNDED };
  });
}
