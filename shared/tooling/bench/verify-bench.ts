import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { createDatabase } from '../../lab/init-stores.js';
import { INVENTORY_KEY } from '../../lab/orders/order-keys.js';
import { keys } from '../../outbox/redis/keys.js';
import { setGuards } from '../../outbox/redis/guards.js';
import { openDatabase, type Db } from '../../outbox/store/open-database.js';
import { REPO_ROOT } from '../local/pm2.js';
import { RedisServer, testClient } from '../local/redis-server.js';
import { progress } from './progress.js';

export interface VerifyRun {
  events: number;
  orders: number;
  /** Of `events`, those committed before the dedupe window, their processed entries and apply counts swept. */
  sweptEvents: number;
  /** The bulk-making of the store and Redis, ms (not what is measured: how long the stage waited). */
  seedMs: number;
  exitCode: number | null;
  ok: boolean;
  /** verify's rows that ended in FAIL. */
  failed: string[];
  wallMs: number;
  /** The child's VmHWM (peak resident set), MiB, the last value read before it exited. */
  peakRssMb: number;
  /** The longest call SLOWLOG recorded during the run, µs (0: none took `slowlogThresholdUs` or more). */
  slowestCallUs: number;
  /** That call's command and first arguments ('' when none). */
  slowestCall: string;
  /** Calls of `slowlogThresholdUs` or more, and of more than 10 ms. */
  slowCalls: number;
  callsOver10Ms: number;
  slowlogThresholdUs: number;
  /** Redis's commands during the run (INFO commandstats after CONFIG RESETSTAT). */
  redisCalls: number;
  /**
   * The command with the highest mean time per call and that mean, µs: what a call costs Redis when
   * the machine does not preempt it, against which a SLOWLOG outlier can be read.
   */
  heaviestCommand: string;
  heaviestMeanUs: number;
  /** LATENCY LATEST's longest event of 10 ms or more during the run, ms (0: none). */
  latencyPeakMs: number;
  /** Redis used_memory once seeded, MiB: the history verify walks. */
  redisUsedMb: number;
  /** The 1-minute load average after the run: SLOWLOG times wall time, which a busy machine stretches. */
  loadAverage: number;
}

export interface VerifyFigures {
  runs: VerifyRun[];
}

const CLI = join(REPO_ROOT, 'dist', 'apps', 'cli', 'main.js');
const SLOWLOG_US = 1000;
const SKUS = 100;
/** Rows per SQLite transaction and fields per pipelined HSET: few round trips, bounded memory. */
const CHUNK = 20_000;

/** A UUID-shaped event id (36 characters, as the store's), unique per index. */
const eventIdOf = (i: number) => {
  const hex = i.toString(16);
  return `${hex.padStart(8, '0').slice(-8)}-0000-4000-8000-${hex.padStart(12, '0')}`;
};

/** One bulk-made history: its orders, and how many of the first ones were committed before the window. */
interface History {
  orders: number;
  sweptOrders: number;
  /** Commit time of the orders in the window, ms; the swept ones were committed WINDOW_MS + 1 day earlier. */
  at: number;
}

const WINDOW_MS = 7 * 24 * 3600_000;
const committedAt = (h: History, o: number) => (o < h.sweptOrders ? h.at - WINDOW_MS - 24 * 3600_000 : h.at);

/**
 * The lab's history, PUBLISHED: `orders` orders, each an OrderPlaced (qty 1) then an
 * OrderQtyChanged to qty 2, so that aggregates have more than one seq. Order o's events are rows
 * 2o + 1 and 2o + 2 (0-based o).
 */
function seedStore(db: Db, h: History): string {
  const { orders } = h;
  const events = 2 * orders;
  const order = db.prepare('INSERT INTO orders (id, sku, qty, status) VALUES (?, ?, 2, ?)');
  const outbox = db.prepare(
    `INSERT INTO outbox (id, event_id, aggregate_id, seq, event_type, payload, status,
                         created_at, published_at, prev_created_at)
     VALUES (?, ?, ?, ?, ?, ?, 'PUBLISHED', ?, ?, ?)`,
  );
  const aggregate = db.prepare(
    'INSERT INTO outbox_aggregates (aggregate_id, last_seq, last_at, prev_at) VALUES (?, 2, ?, ?)',
  );
  const insert = db.transaction((from: number, to: number) => {
    for (let o = from; o < to; o += 1) {
      const id = o + 1;
      const sku = `SKU-${o % SKUS}`;
      const key = `order:${id}`;
      const at = committedAt(h, o);
      order.run(id, sku, 'PLACED');
      const placed = JSON.stringify({ orderId: id, sku, qty: 1 });
      outbox.run(2 * o + 1, eventIdOf(2 * o), key, 1, 'OrderPlaced', placed, at, at, 0);
      const changed = JSON.stringify({ orderId: id, sku, qty: 2, previousQty: 1 });
      outbox.run(2 * o + 2, eventIdOf(2 * o + 1), key, 2, 'OrderQtyChanged', changed, at + 1, at + 1, at);
      aggregate.run(key, at + 1, at);
    }
  });
  const bar = progress(`verify: ${events} events into app.db`, orders);
  for (let from = 0; from < orders; from += CHUNK / 2) {
    insert(from, Math.min(orders, from + CHUNK / 2));
    bar.set(Math.min(orders, from + CHUNK / 2));
  }
  bar.finish();
  db.prepare("UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox'").run(2 * orders);
  return db.prepare("SELECT value FROM outbox_meta WHERE key = 'store_id'").pluck().get() as string;
}

/**
 * What the consumer and the relay would have left in Redis for that history, in the forms the
 * apply script (apply-events-14.lua) and the push script (push-events-3.lua) write them. The
 * swept orders' events have no processed entry nor apply count, as the window's sweep
 * (sweep-window-5.lua) leaves them: counted in `sweptEvents`, their applied seq the evidence.
 */
async function seedRedis(redis: Redis, storeId: string, h: History): Promise<void> {
  const { orders, at } = h;
  const events = 2 * orders;
  const swept = 2 * h.sweptOrders;
  const bar = progress(`verify: ${events} events into Redis`, events);
  for (let from = 0; from < events; from += CHUNK) {
    const processed: string[] = [];
    const seqs: [string, string][] = [];
    for (let i = from; i < Math.min(events, from + CHUNK); i += 1) {
      const id = eventIdOf(i);
      const seq = (i % 2) + 1;
      const type = seq === 1 ? 'OrderPlaced' : 'OrderQtyChanged';
      const aggregate = `order:${Math.floor(i / 2) + 1}`;
      const entry = { type, aggregate, seq, effects: 1, applyOrder: i + 1, appliedAt: at + 2 };
      if (i >= swept) processed.push(id, JSON.stringify(entry));
      if (seq === 2) seqs.push([entry.aggregate, '2']);
    }
    await setGuards(redis, seqs);
    const pipeline = redis.pipeline();
    if (processed.length > 0) {
      const counts = processed.map((value, k) => (k % 2 === 0 ? value : '1'));
      pipeline.hset(keys.processed, ...processed).hset(keys.applyCount, ...counts);
    }
    await pipeline.exec();
    bar.set(Math.min(events, from + CHUNK));
  }
  bar.finish();
  // Every order ends at qty 2 and SKU o % SKUS.
  const reserved: string[] = [];
  for (let s = 0; s < SKUS; s += 1) {
    const perSku = Math.floor(orders / SKUS) + (s < orders % SKUS ? 1 : 0);
    if (perSku > 0) reserved.push(`SKU-${s}`, String(2 * perSku));
  }
  const last = events - 1;
  await redis
    .multi()
    .hset(INVENTORY_KEY, ...reserved)
    .sadd(keys.effectKeys, INVENTORY_KEY)
    .hset(keys.stats, 'applied', events)
    .set(keys.enqueued, events)
    // sweptThrough: past the swept orders' commits (their seq 2 one ms after), before the others'.
    .hset(keys.window, { windowMs: WINDOW_MS, sweptEvents: swept, sweptThrough: swept > 0 ? committedAt(h, 0) + 1 : 0 })
    .hset(keys.meta, {
      store: storeId,
      claimedAt: at,
      partition: '0/1',
      pushedId: events,
      pushedEvent: eventIdOf(last),
      pushedAggregate: `order:${orders}`,
      pushedSeq: 2,
      latestId: events,
      latestEvent: eventIdOf(last),
      latestAggregate: `order:${orders}`,
      latestSeq: 2,
    })
    .exec();
}

function hwmMb(pid: number): number | undefined {
  try {
    const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Runs `outbox verify` as its own process, polling its peak RSS every 50 ms until it exits. */
async function runVerify(dir: string, redisUrl: string) {
  const started = performance.now();
  const child = spawn(process.execPath, [CLI, 'verify', '--dir', dir, '--redis', redisUrl, '--settle', '0s'], {
    env: { ...process.env, OUTBOX_DIR: dir, REDIS_URL: redisUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk) => (stdout += chunk));
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  let code: number | null | undefined;
  const exited = new Promise<void>((resolve) => child.on('exit', (c) => ((code = c), resolve())));
  let peakRssMb = 0;
  // VmHWM only grows: the last value read before the exit is the peak (to within 50 ms of the end).
  while (code === undefined) {
    peakRssMb = hwmMb(child.pid!) ?? peakRssMb;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await exited;
  const wallMs = performance.now() - started;
  // 1 is a verdict (an invariant failed), reported as such; anything else is verify not running.
  if (code !== 0 && code !== 1) {
    throw new Error(`outbox verify exited with ${code}: ${stderr.trim().split('\n').pop()}`);
  }
  return { code: code ?? null, stdout, wallMs, peakRssMb };
}

/** The slowest call SLOWLOG kept: [id, at, durationUs, args, …] per entry. */
function slowest(entries: unknown[]): { us: number; call: string } {
  let found = { us: 0, call: '' };
  for (const entry of entries as [number, number, number, string[]][]) {
    if (entry[2] > found.us) found = { us: entry[2], call: entry[3].slice(0, 3).join(' ') };
  }
  return found;
}

async function measureOne(
  workspace: string,
  redis: Redis,
  redisUrl: string,
  events: number,
  sweptHalf: boolean,
): Promise<VerifyRun> {
  const dir = join(workspace, `verify-${events}${sweptHalf ? '-swept' : ''}`);
  createDatabase(dir);
  const seedStarted = performance.now();
  const orders = Math.floor(events / 2);
  const history: History = { orders, sweptOrders: sweptHalf ? Math.floor(orders / 2) : 0, at: Date.now() - 60_000 };
  const db = openDatabase(dir);
  let storeId;
  try {
    storeId = seedStore(db, history);
  } finally {
    db.close();
  }
  await redis.flushall();
  await seedRedis(redis, storeId, history);
  const seedMs = performance.now() - seedStarted;
  const redisUsedMb = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1] ?? 0) / 2 ** 20;

  // Every call of 1 ms or more is kept (the seeding's big HSETs are cleared first), and every stall of 10 ms.
  await redis.config('SET', 'slowlog-log-slower-than', String(SLOWLOG_US));
  await redis.config('SET', 'slowlog-max-len', '10000');
  await redis.config('SET', 'latency-monitor-threshold', '10');
  await redis.slowlog('RESET');
  await redis.call('LATENCY', 'RESET');
  await redis.config('RESETSTAT');
  const run = await runVerify(dir, redisUrl);
  const log = (await redis.slowlog('GET', -1)) as unknown[];
  const latency = (await redis.call('LATENCY', 'LATEST')) as [string, number, number, number][];
  const stats = await redis.info('commandstats');
  // This connection's own INFO call is counted too: one call, left in.
  const commands = [...stats.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)/gm)];
  const redisCalls = commands.reduce((sum, m) => sum + Number(m[2]), 0);
  const heaviest = commands.reduce((max, m) => (Number(m[3]) > Number(max[3]) ? m : max), ['', '', '', '0']);
  const top = slowest(log);
  return {
    events: 2 * orders,
    orders,
    sweptEvents: 2 * history.sweptOrders,
    seedMs,
    exitCode: run.code,
    ok: run.code === 0 && /^VERIFY OK$/m.test(run.stdout),
    failed: run.stdout.split('\n').filter((line) => /\sFAIL$/.test(line)),
    wallMs: run.wallMs,
    peakRssMb: run.peakRssMb,
    slowestCallUs: top.us,
    slowestCall: top.call,
    slowCalls: log.length,
    callsOver10Ms: (log as [number, number, number][]).filter((entry) => entry[2] > 10_000).length,
    slowlogThresholdUs: SLOWLOG_US,
    redisCalls,
    heaviestCommand: heaviest[1],
    heaviestMeanUs: Number(heaviest[3]),
    latencyPeakMs: latency.reduce((max, [, , , peak]) => Math.max(max, peak), 0),
    redisUsedMb,
    loadAverage: loadavg()[0],
  };
}

/**
 * `outbox verify` (the CLI, as an operator runs it) over bulk-made histories of each size, on a
 * redis-server of its own: its wall time, peak RSS and the slowest call it made Redis run.
 */
export async function benchVerify(workspace: string, sizes: number[]): Promise<VerifyFigures> {
  const server = await RedisServer.start([], join(workspace, 'verify-redis'));
  const redis = testClient(server.url);
  try {
    const runs: VerifyRun[] = [];
    for (const events of sizes) runs.push(await measureOne(workspace, redis, server.url, events, false));
    // The largest again with its older half past the window, records swept: what a long-running deployment holds.
    runs.push(await measureOne(workspace, redis, server.url, sizes[sizes.length - 1], true));
    return { runs };
  } finally {
    redis.disconnect();
    await server.destroy();
  }
}
