import { dirname } from 'node:path';
import type { Redis } from 'ioredis';
import { readHeartbeats, type ConsumerHeartbeat } from '../outbox/consumer/heartbeats.js';
import { healthTargetsOf, probeHealth, type AppHealth } from '../runtime/health/app-health.js';
import type { Db } from '../outbox/store/open-database.js';
import { hasPublished, storeIdOf } from '../outbox/store/store-meta.js';
import { behindEvidence, describeEvidence, sqliteHistory, type BehindEvidence, type StoreHistory } from '../outbox/relay/store-pairing.js';
import { pgHistory } from '../outbox/postgres/pg-pairing.js';
import type { Queryable } from '../outbox/postgres/pg-schema.js';
import { pgHasPublished, pgStoreIdOf } from '../outbox/postgres/pg-store-meta.js';
import { parseMessage } from '../outbox/store/parse-message.js';
import { readEnvelope } from '../outbox/redis/envelope.js';
import { keys } from '../outbox/redis/keys.js';
import { readGuards } from '../outbox/redis/guards.js';
import { namespacePrefixOfConnection } from '../outbox/redis/scan-keys.js';
import { recordedProcessingLists } from '../outbox/redis/processing-lists.js';
import { mastersOf } from '../outbox/redis/cluster-client.js';
import { partitionsOf, type Partitions } from '../outbox/redis/partitions.js';
import { evictionProblem, readRedisSettings, type RedisSettings } from '../outbox/redis/settings.js';
import { count, duration, readSettings } from '../runtime/config/settings.js';
import {
  formatBytes,
  formatMemory,
  heldStatusOf,
  memoryAlerts,
  memoryStatusOf,
  readPartitionMemory,
  type HeldStatus,
  type MemoryStatus,
  type PartitionMemory,
} from './status-memory.js';

export interface StoreStatus {
  /** The store's database: app.db (SQLite) or PostgreSQL. */
  source: StoreSource;
  /** Its store id. */
  id: string;
  /** The Redis namespace ('' = none). */
  namespace: string;
  /**
   * What Redis says of it: serves it, serves no store yet, lost its state, serves it but was pushed
   * a row the store lost (the store is behind it: restored from an older backup), or serves another store.
   */
  redis: 'serves' | 'unclaimed' | 'lost' | 'behind' | 'foreign';
  /** The store Redis serves, when it serves one. */
  servedStore: string | null;
  /**
   * When the store is behind Redis, what shows it: an outbox row Redis was pushed (its id, its event,
   * and the event the store holds there now, null: none), or an event of the store the consumer found
   * at a seq another event took.
   */
  behind: BehindEvidence | null;
  /** Times the relay rebuilt Redis from the store, and the last time (ms since epoch), from its outbox_meta. */
  rebuilds: number;
  lastRebuildAt: number | null;
  /** Events pruned before the last loss: their effects could not be rebuilt. */
  unrecoverable: number;
}

/** Which database the outbox store is in, as messages name it. */
export type StoreSource = 'SQLite' | 'PostgreSQL';

export interface SystemStatus {
  store: StoreStatus;
  pending: number;
  /** Age of the oldest PENDING row in ms, null when none. */
  oldestPendingAgeMs: number | null;
  queued: number;
  /** Processing list name -> length, only the non-empty ones. */
  processing: Record<string, number>;
  enqueued: number;
  processed: number;
  parked: number;
  deadLettered: number;
  /** Events whose handler failed, waiting in a processing list for their next attempt. */
  retrying: number;
  /** Aggregates whose next event is dead-lettered (their later events parked behind it): at most BLOCKED_SHOWN. */
  blocked: BlockedAggregate[];
  /** How many aggregates are blocked in all. */
  blockedTotal: number;
  consumerStats: Record<string, number>;
  /** The relay app's last finished job, null when it never ran. */
  relayLastRun: { ageMs: number; events: number; batches: number; durationMs: number } | null;
  /** Each consumer app's last heartbeat (`outbox:consumers`), stale and stopped ones included. */
  consumers: ConsumerHeartbeat[];
  /** What each app's health endpoint answered (or that none did); empty when not asked. */
  apps: AppHealth[];
  /** Persistence and eviction: whether outbox's state survives a restart and memory pressure. */
  redis: RedisSettings;
  /** Settings under which Redis may lose outbox's state, one sentence each. */
  warnings: string[];
  /** Redis memory: used and maxmemory per server, bytes per event and aggregate, days until full; null: unreadable. */
  memory: MemoryStatus | null;
  /** Why the memory could not be read (MEMORY denied, a key of another type), when it could not. */
  memoryError?: string;
  /** Parked and dead-lettered entries: how many and their bytes. */
  held: HeldStatus;
  /** Out of memory, maxmemory near, too many parked events, an old dead letter: one sentence each. */
  alerts: string[];
  /** With several partitions: each one's figures (the others above are their sums); absent with one. */
  partitions?: PartitionStatus[];
}

/** One partition's queue, consumer state and lease. */
export interface PartitionStatus {
  index: number;
  /** What the partition's meta says of the store (`StoreStatus.redis`). */
  redis: StoreStatus['redis'];
  queued: number;
  /** Messages in its processing lists. */
  inFlight: number;
  /** Events applied in it (HLEN processed). */
  processed: number;
  parked: number;
  deadLettered: number;
  /** The consumer holding its lease, "<consumerId>#<token>", and the lease's ms left; null when none holds it. */
  lease: { owner: string; ttlMs: number } | null;
  /** Its own bytes and rate (`PartitionMemory`), null when they could not be read. */
  memory: PartitionMemory | null;
}

export interface BlockedAggregate {
  /** The aggregate key, e.g. `order:7`. */
  aggregateId: string;
  /** The dead-lettered seq the aggregate waits for. */
  deadSeq: number;
  /** Its later events parked behind it, in seq order. */
  waitingSeqs: number[];
}

/** Blocked aggregates `outbox status` lists; the rest are counted. */
export const BLOCKED_SHOWN = 20;
/** Entries or fields per Redis call when status walks the dead letters and parked entries: each call stays short. */
const CHUNK = 1000;

/**
 * The aggregates a dead letter blocks: its event belongs to the store Redis serves and is the
 * aggregate's next one (seq > applied seq), so every later event of it is parked until the dead
 * letter is retried and applied. Read in chunks (LRANGE, HMGET, HSCAN): no call walks a whole key.
 */
async function blockedAggregates(redis: Redis, servedStore: string | undefined): Promise<BlockedAggregate[]> {
  const deadSeqsOf = new Map<string, number[]>();
  const length = await redis.llen(keys.deadLetter);
  for (let start = 0; start < length; start += CHUNK) {
    for (const entry of await redis.lrange(keys.deadLetter, start, start + CHUNK - 1)) {
      try {
        const event = parseMessage(readEnvelope(entry)?.message ?? '');
        if (event.storeId !== servedStore) continue;
        const seqs = deadSeqsOf.get(event.aggregateId);
        if (seqs) seqs.push(event.seq);
        else deadSeqsOf.set(event.aggregateId, [event.seq]);
      } catch {
        // Not an event (the reason it was dead-lettered): it blocks nothing.
      }
    }
  }
  const deadSeqOf = new Map<string, number>();
  const aggregates = [...deadSeqsOf.keys()];
  for (let start = 0; start < aggregates.length; start += CHUNK) {
    const chunk = aggregates.slice(start, start + CHUNK);
    const applied = await readGuards(redis, chunk);
    chunk.forEach((aggregate, i) => {
      const next = deadSeqsOf.get(aggregate)!.filter((seq) => seq > Number(applied[i] ?? 0));
      if (next.length > 0) deadSeqOf.set(aggregate, Math.min(...next));
    });
  }
  const waiting = new Map<string, number[]>();
  if (deadSeqOf.size > 0) {
    let cursor = '0';
    do {
      const [next, flat] = await redis.hscan(keys.parked, cursor, 'COUNT', CHUNK);
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        // A parked field is "<aggregate key>:<seq>"; the key itself holds a ':'.
        const field = flat[i];
        const aggregate = field.slice(0, field.lastIndexOf(':'));
        const seq = Number(field.slice(field.lastIndexOf(':') + 1));
        const deadSeq = deadSeqOf.get(aggregate);
        if (deadSeq === undefined || seq <= deadSeq) continue;
        const seqs = waiting.get(aggregate);
        if (seqs) seqs.push(seq);
        else waiting.set(aggregate, [seq]);
      }
    } while (cursor !== '0');
  }
  return [...deadSeqOf]
    .map(([aggregateId, deadSeq]) => ({
      aggregateId,
      deadSeq,
      // HSCAN may return a field twice: once each.
      waitingSeqs: [...new Set(waiting.get(aggregateId) ?? [])].sort((a, b) => a - b),
    }))
    .sort((a, b) => (a.aggregateId < b.aggregateId ? -1 : a.aggregateId > b.aggregateId ? 1 : 0));
}

/** What a loss of acknowledged writes means for outbox, as the warnings say it. */
const REPAIRED = 'published events among them (verify names them, verify --repair republishes them)';

/** Why these settings may lose outbox's state; empty when they do not (or cannot be read). */
function settingsWarnings(settings: RedisSettings): string[] {
  const warnings: string[] = [];
  if (!settings.aofEnabled && settings.save === '') {
    warnings.push("Redis keeps nothing on disk: a restart loses the queue and the consumer's state");
  } else if (!settings.aofEnabled && settings.save) {
    warnings.push(`Redis keeps only RDB snapshots: a crash or kill of Redis loses what it acknowledged since the last one, ${REPAIRED}; turn on appendonly with appendfsync always`);
  } else if (settings.aofEnabled && settings.appendfsync === 'everysec') {
    warnings.push(
      `Redis answers writes before they are on disk (appendfsync everysec): a crash of the machine, or of Redis while its disk is slow, may lose the last ones it acknowledged (about 2 s), ${REPAIRED}; set appendfsync always`,
    );
  } else if (settings.aofEnabled && settings.appendfsync === 'no') {
    warnings.push(`Redis leaves it to the OS when its writes reach the disk (appendfsync no): a crash of the machine may lose the last ones it acknowledged (up to about 30 s), ${REPAIRED}; set appendfsync always`);
  }
  if (settings.maxmemoryPolicy !== 'noeviction') warnings.push(`Redis ${evictionProblem(settings.maxmemoryPolicy)}`);
  return warnings;
}

/** What app.db says of its store, and what Redis (its `outbox:meta` hash, `meta`) says of it. */
export async function storeStatusOf(reads: StatusStoreReads, meta: Record<string, string>, namespace: string): Promise<StoreStatus> {
  const storeId = await reads.storeId();
  const lastRebuildAt = await reads.meta('redis_rebuilt_at');
  const behind = meta.store === storeId ? await behindEvidence(meta, reads.history) : null;
  return {
    source: reads.source,
    id: storeId,
    namespace,
    redis: meta.store === undefined ? ((await reads.hasPublished()) ? 'lost' : 'unclaimed') : meta.store !== storeId ? 'foreign' : behind !== null ? 'behind' : 'serves',
    servedStore: meta.store ?? null,
    behind,
    rebuilds: Number((await reads.meta('redis_rebuilds')) ?? 0),
    lastRebuildAt: lastRebuildAt === undefined ? null : Number(lastRebuildAt),
    unrecoverable: Number(meta.unrecoverable ?? 0),
  };
}

export interface StatusOptions {
  /** Ask the apps' health endpoints (see `healthTargetsOf`, read from `env`), 500 ms each, in parallel. Default true. */
  probeApps?: boolean;
  env?: NodeJS.ProcessEnv;
  /** Warn above this many parked events. Default 1000 (`statusSettings.warnParked`). */
  warnParked?: number;
  /** Warn when a dead letter is older than this, ms. Default 1 h (`statusSettings.warnDeadAge`). */
  warnDeadAgeMs?: number;
}

/** The alert thresholds of `outbox status` (flag, variable and default; `outbox status --help` shows them). */
export const statusSettings = {
  warnParked: count({
    flag: 'warn-parked',
    env: 'OUTBOX_WARN_PARKED',
    default: '1000',
    min: 0,
    max: 1_000_000_000,
    describe: 'warn when more events than this are parked (waiting behind a gap or a dead letter)',
  }),
  warnDeadAge: duration({
    flag: 'warn-dead-age',
    env: 'OUTBOX_WARN_DEAD_AGE',
    default: '1h',
    describe: 'warn when a dead letter is older than this (nobody retried or dropped it)',
  }),
};
/** The thresholds when neither flag nor variable sets them. */
const DEFAULTS = readSettings(statusSettings, {}, {});

/** The parked and dead-letter alerts, one sentence each. */
function heldAlerts(held: HeldStatus, warnParked: number, warnDeadAgeMs: number): string[] {
  const alerts: string[] = [];
  if (held.parked > warnParked) {
    alerts.push(
      `${held.parked} events parked (${formatBytes(held.parkedBytes)}), ` +
        `above ${warnParked} (--warn-parked / OUTBOX_WARN_PARKED): ` +
        'they wait behind a gap or a dead letter; see "blocked" and "outbox parked list"',
    );
  }
  if (held.oldestDeadLetterAgeMs !== null && held.oldestDeadLetterAgeMs > warnDeadAgeMs) {
    alerts.push(
      `a dead letter is ${age(held.oldestDeadLetterAgeMs)} old, ` +
        `older than ${age(warnDeadAgeMs)} (--warn-dead-age / OUTBOX_WARN_DEAD_AGE): ` +
        '"outbox dead-letter list" shows it; "outbox dead-letter retry" once its cause is fixed, or "drop"',
    );
  }
  return alerts;
}

/** What status reads of the outbox store, whichever it is (app.db, or PostgreSQL). */
export interface StatusStoreReads {
  source: StoreSource;
  /** The data dir, which the apps' health answers must name. */
  dir: string;
  /** PENDING rows and the created_at of the oldest. */
  pending(): Promise<{ n: number; oldest: number | null }>;
  storeId(): Promise<string>;
  /** A value of outbox_meta. */
  meta(key: string): Promise<string | undefined>;
  hasPublished(): Promise<boolean>;
  /** Its rows by id and what prune deleted, to tell whether it is behind Redis. */
  history: StoreHistory;
}

/** The reads of app.db. */
export function sqliteStatusReads(db: Db): StatusStoreReads {
  return {
    source: 'SQLite',
    dir: dirname(db.name),
    pending: async () => db.prepare<[], { n: number; oldest: number | null }>("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox WHERE status = 'PENDING'").get()!,
    storeId: async () => storeIdOf(db),
    meta: async (key) => db.prepare('SELECT value FROM outbox_meta WHERE key = ?').pluck().get(key) as string | undefined,
    hasPublished: async () => hasPublished(db),
    history: sqliteHistory(db),
  };
}

/** The reads of the PostgreSQL store; `dir` is the data dir of the command or app. */
export function pgStatusReads(pool: Queryable, dir: string): StatusStoreReads {
  return {
    source: 'PostgreSQL',
    dir,
    async pending() {
      const { rows } = await pool.query<{ n: string; oldest: string | null }>("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox WHERE status = 'PENDING'");
      return { n: Number(rows[0].n), oldest: rows[0].oldest === null ? null : Number(rows[0].oldest) };
    },
    storeId: () => pgStoreIdOf(pool),
    async meta(key) {
      const { rows } = await pool.query<{ value: string }>('SELECT value FROM outbox_meta WHERE key = $1', [key]);
      return rows[0]?.value;
    },
    hasPublished: () => pgHasPublished(pool),
    history: pgHistory(pool),
  };
}

/** A connection's namespace: its key prefix without a partition's tag and the ':'. */
function namespaceOf(redis: Redis): string {
  return namespacePrefixOfConnection(redis).slice(0, -1);
}

/** What one partition (or the one Redis) holds. */
async function readPartition(redis: Redis) {
  const processing: Record<string, number> = {};
  // The lists the takes recorded: a SCAN here would walk every dedupe marker. (A list no take
  // recorded, left by a consumer that died after the set was lost, is recorded by the next
  // consumer's scan at its start, or within the hour.)
  for (const list of await recordedProcessingLists(redis)) {
    const length = await redis.llen(list);
    if (length > 0) processing[list] = length;
  }
  const [meta, queued, enqueued, processed, parked, deadLettered, retrying, stats, lease, leaseTtl] = await Promise.all([
    redis.hgetall(keys.meta),
    redis.llen(keys.events),
    redis.get(keys.enqueued),
    redis.hlen(keys.processed),
    redis.hlen(keys.parked),
    redis.llen(keys.deadLetter),
    redis.hlen(keys.attempts),
    redis.hgetall(keys.stats),
    redis.get(keys.partitionLease),
    redis.pttl(keys.partitionLease),
  ]);
  // Memory is shown, not needed: a Redis that denies MEMORY (or holds a key of another type) still gets its status.
  let memory: PartitionMemory | null = null;
  let memoryError: string | undefined;
  try {
    memory = await readPartitionMemory(redis, processed, Number(stats.applied ?? 0));
  } catch (error) {
    memoryError = (error as Error).message;
  }
  return {
    processing,
    meta,
    queued,
    enqueued: Number(enqueued ?? 0),
    processed,
    parked,
    deadLettered,
    retrying,
    stats,
    lease: lease === null ? null : { owner: lease, ttlMs: Math.max(0, leaseTtl) },
    memory,
    memoryError,
  };
}

/** How bad a partition's store state is: the whole store is shown as its worst partition's. */
const SEVERITY: Record<StoreStatus['redis'], number> = { serves: 0, unclaimed: 1, lost: 2, behind: 3, foreign: 4 };

/** The partitions' store states as one: the worst partition's, with the pruned events lost in all of them. */
export function worstStore(stores: StoreStatus[]): StoreStatus {
  const worst = stores.reduce((a, b) => (SEVERITY[b.redis] > SEVERITY[a.redis] ? b : a));
  return { ...worst, unrecoverable: stores.reduce((n, s) => n + s.unrecoverable, 0) };
}

/** Each consumer's heartbeats over the partitions (one per partition it consumed): the newest, its applied and queued summed. */
export function mergeHeartbeats(each: ConsumerHeartbeat[][]): ConsumerHeartbeat[] {
  if (each.length === 1) return each[0];
  const byId = new Map<string, ConsumerHeartbeat[]>();
  for (const beat of each.flat()) byId.set(beat.consumerId, [...(byId.get(beat.consumerId) ?? []), beat]);
  return [...byId.values()]
    .map((beats) => {
      const newest = beats.reduce((a, b) => ((b.at ?? -1) > (a.at ?? -1) ? b : a));
      const sum = (pick: (b: ConsumerHeartbeat) => number | undefined) => beats.reduce((n, b) => n + (pick(b) ?? 0), 0);
      return newest.state === 'unreadable' ? newest : { ...newest, applied: sum((b) => b.applied), queued: sum((b) => b.queued) };
    })
    .sort((a, b) => a.consumerId.localeCompare(b.consumerId));
}

/**
 * Everything `outbox status` shows; with partitions, summed over them, each one's own figures in
 * `partitions`. Ages are measured at `now`, by default the time the reads are done: a time taken
 * before them would make what was written meanwhile (a relay pass that ended, a row inserted) look
 * younger than 0.
 */
export async function collectStatus(source: Db | StatusStoreReads, queues: Redis | Partitions, now?: number, options: StatusOptions = {}): Promise<SystemStatus> {
  const reads = 'prepare' in source ? sqliteStatusReads(source) : source;
  const { count, clients } = partitionsOf(queues);
  // Partition 0 holds what is not partitioned: the relay's last run.
  const redis = clients[0];
  const consumers = mergeHeartbeats(await Promise.all(clients.map((client) => readHeartbeats(client, now))));
  const namespace = namespaceOf(redis);
  // Asked while Redis is read below; an app that is down or frozen costs at most the probe's timeout.
  const expected = { dir: reads.dir, namespace };
  const apps = options.probeApps === false ? Promise.resolve([]) : Promise.all(healthTargetsOf(consumers, options.env).map((target) => probeHealth(target, expected)));
  const pending = await reads.pending();
  const each = await Promise.all(clients.map(readPartition));
  // A cluster's settings are its first master's (each master was checked for noeviction on connect).
  const [lastRun, settings] = await Promise.all([redis.hgetall(keys.relayLastRun), readRedisSettings(mastersOf(redis)[0])]);
  const readAt = now ?? Date.now();
  const stores = await Promise.all(each.map((p) => storeStatusOf(reads, p.meta, namespace)));
  const store = worstStore(stores);
  const total = (pick: (p: (typeof each)[number]) => number) => each.reduce((n, p) => n + pick(p), 0);
  const processing: Record<string, number> = {};
  for (const p of each) for (const [list, n] of Object.entries(p.processing)) processing[list] = (processing[list] ?? 0) + n;
  const consumerStats: Record<string, number> = {};
  for (const p of each) for (const [k, v] of Object.entries(p.stats)) consumerStats[k] = (consumerStats[k] ?? 0) + Number(v);
  const deadLettered = total((p) => p.deadLettered);
  const blocked = deadLettered === 0 ? [] : (await Promise.all(each.map((p, i) => (p.deadLettered > 0 ? blockedAggregates(clients[i], p.meta.store) : [])))).flat();
  const memoryError = each.find((p) => p.memory === null)?.memoryError;
  const parts = each.map((p) => p.memory).filter((m): m is PartitionMemory => m !== null);
  const memory = memoryError === undefined ? await memoryStatusOf(clients, parts) : null;
  const held = heldStatusOf(parts, total((p) => p.parked), deadLettered);
  const alerts = [
    ...(memory ? memoryAlerts(memory) : []),
    ...heldAlerts(held, options.warnParked ?? DEFAULTS.warnParked, options.warnDeadAgeMs ?? DEFAULTS.warnDeadAge),
  ];
  return {
    store,
    pending: pending.n,
    oldestPendingAgeMs: pending.oldest === null ? null : Math.max(0, readAt - pending.oldest),
    queued: total((p) => p.queued),
    processing,
    enqueued: total((p) => p.enqueued),
    processed: total((p) => p.processed),
    parked: total((p) => p.parked),
    deadLettered,
    retrying: total((p) => p.retrying),
    blocked: blocked
      .sort((a, b) => (a.aggregateId < b.aggregateId ? -1 : a.aggregateId > b.aggregateId ? 1 : 0))
      .slice(0, BLOCKED_SHOWN),
    blockedTotal: blocked.length,
    consumerStats,
    relayLastRun: lastRun.at
      ? { ageMs: Math.max(0, readAt - Number(lastRun.at)), events: Number(lastRun.events), batches: Number(lastRun.batches), durationMs: Number(lastRun.durationMs) }
      : null,
    consumers,
    apps: await apps,
    redis: settings,
    warnings: settingsWarnings(settings),
    memory,
    ...(memoryError === undefined ? {} : { memoryError }),
    held,
    alerts,
    ...(count > 1
      ? {
          partitions: each.map((p, index) => ({
            index,
            redis: stores[index].redis,
            queued: p.queued,
            inFlight: Object.values(p.processing).reduce((n, v) => n + v, 0),
            processed: p.processed,
            parked: p.parked,
            deadLettered: p.deadLettered,
            lease: p.lease,
            memory: p.memory,
          })),
        }
      : {}),
  };
}

/** An age for people; one below 0 (a clock read before the thing it measures was written) shows as 0 ms. */
function age(ms: number | null): string {
  if (ms === null) return '-';
  ms = Math.max(0, ms);
  return ms < 1000 ? `${ms} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;
}

function formatStore(store: StoreStatus, now: number): string {
  const namespace = store.namespace === '' ? '' : ` in namespace ${store.namespace}`;
  const database = store.source === 'SQLite' ? 'app.db' : 'the PostgreSQL store';
  const served = {
    serves: 'Redis serves it',
    unclaimed: 'Redis serves no store yet (the first relay pass claims it)',
    lost: `WARN Redis lost its state (no outbox:meta): the relay rebuilds it from ${store.source} on its next pass`,
    behind: `WARN the store is behind Redis: ${store.behind ? describeEvidence(store.behind, database) : ''} (restored from an older backup?): the relay pushes nothing; stop the apps and run "outbox verify --repair"`,
    foreign: `WARN Redis serves another store, ${store.servedStore}: ${database} was recreated, or this is another deployment's Redis`,
  }[store.redis];
  const rebuilt =
    store.rebuilds > 0
      ? `; rebuilt from ${store.source} ${store.rebuilds} time(s), last ${age(now - (store.lastRebuildAt ?? now))} ago` +
        (store.unrecoverable > 0 ? `, WARN ${store.unrecoverable} pruned event(s) could not be rebuilt` : '')
      : '';
  return `${store.id}${namespace}: ${served}${rebuilt}`;
}

function persistence(r: RedisSettings): string {
  const aof = r.aofEnabled ? `AOF on (appendfsync ${r.appendfsync ?? 'unknown'})` : 'AOF off';
  const rdb = r.save === null ? 'RDB unknown' : r.save === '' ? 'RDB off' : `RDB save points ${r.save}`;
  return `${aof}, ${rdb}, maxmemory-policy ${r.maxmemoryPolicy}`;
}

function formatApp(a: AppHealth): string {
  const where = `${a.app} ${a.url.replace(/^http:\/\//, '')}`;
  if (a.state === 'ok') {
    const details = a.report?.checks ?? {};
    const pass = details.passes?.lastPassAgeMs;
    const lag = details.lag;
    const extra = typeof pass === 'number' ? `, last relay pass ${age(pass)} ago` : lag ? `, lag ${age(lag.lagMs as number)}, queued ${String(lag.queued)}` : '';
    return `${where}: ok (pid ${a.report?.pid}${extra})`;
  }
  if (a.state === 'unhealthy') return `${where}: WARN unhealthy (pid ${a.report?.pid}): ${a.reason}`;
  if (a.state === 'elsewhere') return `${where}: WARN ${a.reason}`;
  return `${where}: not running / no answer (${a.reason})`;
}

function formatHeartbeat(c: ConsumerHeartbeat, now: number): string {
  if (c.state === 'unreadable') return `${c.consumerId}: WARN heartbeat entry is not readable`;
  const beat = `heartbeat ${age(c.ageMs)} ago`;
  const numbers = `applied ${c.applied ?? 0}, lag ${age(c.lagMs ?? null)}, queued ${c.queued ?? '-'}`;
  if (c.state === 'stopped') return `${c.consumerId} pid ${c.pid}: stopped ${age(now - (c.stoppedAt ?? now))} ago (${numbers})`;
  if (c.state === 'stale') return `${c.consumerId} pid ${c.pid}: WARN stale, ${beat} (stopped, frozen, killed, or cut off from Redis)`;
  return `${c.consumerId} pid ${c.pid}: ${beat}, ${numbers}`;
}

function formatPartition(p: PartitionStatus): string {
  const state = { serves: '', unclaimed: ', serves no store yet', lost: ', WARN lost its state', behind: ', WARN the store is behind it', foreign: ', WARN serves another store' }[p.redis];
  const lease = p.lease === null ? 'no consumer holds its lease' : `lease held by ${p.lease.owner} (${age(p.lease.ttlMs)} left)`;
  return `${String(p.index).padEnd(3)} queued ${p.queued}, in flight ${p.inFlight}, applied ${p.processed}, parked ${p.parked}, dead-lettered ${p.deadLettered}${state}; ${lease}`;
}

/** Seqs shown per blocked aggregate; the line says how many wait in all. */
const SEQS_SHOWN = 10;

function formatBlocked(b: BlockedAggregate): string {
  const shown = b.waitingSeqs.slice(0, SEQS_SHOWN).join(', ') + (b.waitingSeqs.length > SEQS_SHOWN ? ', …' : '');
  const waiting = b.waitingSeqs.length === 0 ? 'none waiting yet' : `${b.waitingSeqs.length} waiting: seq ${shown}`;
  return `${b.aggregateId} (seq ${b.deadSeq} dead-lettered, ${waiting})`;
}

function formatBlockedLine(s: SystemStatus): string {
  const more = s.blockedTotal > s.blocked.length ? ` and ${s.blockedTotal - s.blocked.length} more` : '';
  const list = s.blocked.map(formatBlocked).join(', ');
  return `blocked     ${list}${more}: "outbox dead-letter retry" once the handler is fixed`;
}

function formatHeld(h: HeldStatus): string {
  const oldest = h.oldestDeadLetterAgeMs === null ? '' : `, the oldest ${age(h.oldestDeadLetterAgeMs)} old`;
  const dead = `dead letters ${h.deadLettered} (${formatBytes(h.deadLetterBytes)})`;
  return `held        parked ${h.parked} (${formatBytes(h.parkedBytes)}), ${dead}${oldest}`;
}

export function formatStatus(s: SystemStatus, now = Date.now()): string[] {
  const lists = Object.entries(s.processing);
  const stats = s.consumerStats;
  return [
    `store       ${formatStore(s.store, now)}`,
    `outbox      pending ${s.pending}, oldest pending ${age(s.oldestPendingAgeMs)}`,
    `relay       ${s.relayLastRun ? `last job ${age(s.relayLastRun.ageMs)} ago: ${s.relayLastRun.events} events in ${s.relayLastRun.batches} batches, ${s.relayLastRun.durationMs} ms` : 'no job has run yet'}`,
    `queue       ${keys.events} ${s.queued}, enqueued in total ${s.enqueued}`,
    `processing  ${lists.length === 0 ? 'none in flight' : lists.map(([key, n]) => `${key} ${n}`).join(', ')}`,
    `consumer    processed ${s.processed}, duplicates skipped ${stats.duplicates ?? 0}, parked ${s.parked} now (${stats.parked ?? 0} ever), dead-lettered ${s.deadLettered}, waiting for a handler retry ${s.retrying}`,
    ...(s.partitions ?? []).map((p, i) => `${i === 0 ? 'partitions ' : '           '} ${formatPartition(p)}`),
    formatHeld(s.held),
    ...(s.blocked.length > 0 ? [formatBlockedLine(s)] : []),
    ...s.apps.map((a, i) => `${i === 0 ? 'apps       ' : '           '} ${formatApp(a)}`),
    ...(s.consumers.length === 0
      ? ['heartbeats  none: no consumer app has run on this Redis']
      : s.consumers.map((c, i) => `${i === 0 ? 'heartbeats ' : '           '} ${formatHeartbeat(c, now)}`)),
    `redis       ${persistence(s.redis)}`,
    ...(s.memory ? formatMemory(s.memory) : [`memory      unreadable: ${s.memoryError ?? 'unknown'}`]),
    ...s.warnings.map((warning) => `WARN        ${warning}`),
    ...s.alerts.map((alert) => `WARN        ${alert}`),
  ];
}
