import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { openDatabase, type Db } from '../../outbox/store/open-database.js';
import { createDatabase } from '../../lab/init-stores.js';
import { REPO_ROOT } from '../local/pm2.js';
import { prune, type PruneResult } from '../../operations/prune/prune.js';
import { keys } from '../../outbox/redis/keys.js';
import { setGuards, unlinkGuards } from '../../outbox/redis/guards.js';
import { createRelay } from '../../outbox/relay/relay.js';
import { median, serveStore, timed, type Rate } from './measure.js';
import { progress } from './progress.js';
import { seedPending } from './relay-bench.js';

export interface RssFigures {
  /** RSS once 10 % of the events were through, MiB. */
  at10PercentMb: number;
  /** RSS at the end, MiB. */
  atEndMb: number;
  peakMb: number;
}

export interface GrowthFigures {
  published: number;
  pending: number;
  /**
   * Relaying `pending` rows with no PUBLISHED row in the table: the median of every round. The
   * two tables are measured in the order empty, full, full, empty (ABBA), so that neither always
   * runs first on a cold process.
   */
  relayEmptyTable: Rate;
  /** The same with `published` PUBLISHED rows in the table. */
  relayFullTable: Rate;
  /** The cost ratio (empty-table rate / full-table rate) of each half: empty measured first, then full first. */
  costRatioByOrder: { emptyFirst: number; fullFirst: number };
  /** One relay poll that finds nothing PENDING, in microseconds (the mean of both passes of each table). */
  idlePollEmptyUs: number;
  idlePollFullUs: number;
  /** Pruning the `published` old rows, 1000 per transaction. */
  prune: PruneResult;
  rssEvents: number;
  relayRss: RssFigures;
  consumerRss: RssFigures;
}

const ROUNDS = 3;
const CLI = join(REPO_ROOT, 'dist', 'apps', 'cli', 'main.js');

/** Old PUBLISHED rows: events 1..rows of one aggregate (its key). */
const PUBLISHED_AGGREGATE = 'order:1000000000';

function insertPublished(db: Db, rows: number): void {
  db.prepare(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, status, created_at, published_at)
     SELECT 'published-' || i, '${PUBLISHED_AGGREGATE}', i, 'OrderPlaced', '{"orderId":0,"sku":"SKU-0","qty":1}', 'PUBLISHED', 0, 0 FROM n`,
  ).run(rows);
  // Its last seq, as append would have recorded it: prune refuses an aggregate applied past it.
  db.prepare('INSERT INTO outbox_aggregates (aggregate_id, last_seq) VALUES (?, ?)').run(PUBLISHED_AGGREGATE, rows);
}

/** Records the old rows as applied, as the consumer would have, so that prune may delete them. */
async function markPublishedApplied(redis: Redis, rows: number): Promise<void> {
  const chunk = 10_000;
  for (let from = 1; from <= rows; from += chunk) {
    const fields: string[] = [];
    for (let i = from; i < Math.min(from + chunk, rows + 1); i += 1) fields.push(`published-${i}`, '{}');
    await redis.hset(keys.processed, ...fields);
  }
  await setGuards(redis, [[PUBLISHED_AGGREGATE, rows]]);
}

async function relayCost(db: Db, redis: Redis, pending: number) {
  await serveStore(redis, db);
  const relay = createRelay(db, redis);
  const rounds: Rate[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    db.exec("UPDATE outbox SET status = 'PENDING' WHERE event_id NOT LIKE 'published-%'");
    await redis.del(keys.events);
    rounds.push(await timed(pending, () => relay.relayAll()));
  }
  const polls = 2000;
  const idle = await timed(polls, async () => {
    for (let i = 0; i < polls; i += 1) await relay.relayAll();
  });
  await redis.del(keys.events);
  return { rounds, idleUs: (idle.ms * 1000) / polls };
}

type Cost = Awaited<ReturnType<typeof relayCost>>;

/** The empty and the full table in the order A B B A, so that warm-up favours neither. */
async function relayCostAbba(empty: Db, full: Db, redis: Redis, pending: number) {
  const emptyFirst = await relayCost(empty, redis, pending);
  const fullSecond = await relayCost(full, redis, pending);
  const fullFirst = await relayCost(full, redis, pending);
  const emptySecond = await relayCost(empty, redis, pending);
  const ratio = (a: Cost, b: Cost) => median(a.rounds).perSecond / median(b.rounds).perSecond;
  return {
    relayEmptyTable: median([...emptyFirst.rounds, ...emptySecond.rounds]),
    relayFullTable: median([...fullSecond.rounds, ...fullFirst.rounds]),
    costRatioByOrder: { emptyFirst: ratio(emptyFirst, fullSecond), fullFirst: ratio(emptySecond, fullFirst) },
    idlePollEmptyUs: (emptyFirst.idleUs + emptySecond.idleUs) / 2,
    idlePollFullUs: (fullSecond.idleUs + fullFirst.idleUs) / 2,
  };
}

function rssMb(pid: number): number {
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** Runs `outbox <args>` as its own process and samples its RSS against `done()` (0..1). */
async function sampleRss(args: string[], env: Record<string, string>, done: () => Promise<number>, label: string): Promise<RssFigures> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: 'ignore' });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const bar = progress(label, 100);
  const figures: RssFigures = { at10PercentMb: 0, atEndMb: 0, peakMb: 0 };
  let running = true;
  void exited.then(() => (running = false));
  while (running) {
    const rss = rssMb(child.pid!);
    const fraction = await done();
    bar.set(Math.round(fraction * 100));
    if (rss > 0) {
      figures.peakMb = Math.max(figures.peakMb, rss);
      if (fraction >= 0.1 && figures.at10PercentMb === 0) figures.at10PercentMb = rss;
      figures.atEndMb = rss;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  bar.finish();
  const code = await exited;
  if (code !== 0) throw new Error(`outbox ${args.join(' ')} exited with ${code}`);
  return figures;
}

export async function benchGrowth(workspace: string, redis: Redis, redisUrl: string, published: number, pending: number, rssEvents: number): Promise<GrowthFigures> {
  const emptyDir = join(workspace, 'growth-empty');
  const fullDir = join(workspace, 'growth-full');
  createDatabase(emptyDir);
  createDatabase(fullDir);
  const empty = openDatabase(emptyDir);
  const full = openDatabase(fullDir);
  let costs;
  let pruned: PruneResult;
  try {
    const bar = progress(`growth: ${published} PUBLISHED rows`, 2);
    seedPending(empty, pending);
    insertPublished(full, published);
    seedPending(full, pending);
    bar.tick();
    costs = await relayCostAbba(empty, full, redis, pending);
    bar.finish();
    await markPublishedApplied(redis, published);
    // The last relay pass was the empty table's: prune refuses a store behind what Redis was pushed.
    await serveStore(redis, full);
    const pruneBar = progress(`prune: ${published} old rows`, published);
    pruned = await prune(full, redis, 60_000, { onBatch: (deleted) => pruneBar.set(deleted) });
    pruneBar.finish();
    await redis.del(keys.processed);
    await unlinkGuards(redis);
  } finally {
    empty.close();
    full.close();
  }

  const rssDir = join(workspace, 'rss');
  createDatabase(rssDir);
  const rssDb = openDatabase(rssDir);
  const seedBar = progress(`rss: placing ${rssEvents} orders`, rssEvents);
  for (let i = 0; i < rssEvents; i += 100_000) {
    seedPending(rssDb, Math.min(100_000, rssEvents - i));
    seedBar.tick(Math.min(100_000, rssEvents - i));
  }
  seedBar.finish();
  const pendingLeft = rssDb.prepare("SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'").pluck();
  const env = { OUTBOX_DIR: rssDir, REDIS_URL: redisUrl };
  await redis.del(keys.events);
  await serveStore(redis, rssDb);
  const relayRss = await sampleRss(['relay'], env, async () => 1 - (pendingLeft.get() as number) / rssEvents, 'rss: outbox relay');
  const consumerRss = await sampleRss(['consume', '--consumer-id', 'rss'], env, async () => (await redis.hlen(keys.processed)) / rssEvents, 'rss: outbox consume');
  rssDb.close();
  return {
    published,
    pending,
    ...costs,
    prune: pruned!,
    rssEvents,
    relayRss,
    consumerRss,
  };
}
