import type { Redis } from 'ioredis';
import type { Db } from '../store/open-database.js';
import { bumpReplayGeneration, hasPublished, storeIdOf } from '../store/store-meta.js';
import { StoreBehindError } from '../errors/store-behind-error.js';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { describeRedis } from '../redis/describe.js';
import { keys } from '../redis/keys.js';
import { partitionLayout, partitionOf, partitionsOf, type Partitions } from '../redis/partitions.js';
import { scanKeys, unlinkAll } from '../redis/scan-keys.js';
import { claimStore } from '../redis/scripts.js';
import { checkPartitionLayout, layoutMismatch } from '../redis/partition-layout.js';

/** What `ensurePaired` found or did. */
export type Pairing =
  | { kind: 'paired' }
  /** First use: this Redis served no store and the store never published, so nothing was lost. */
  | { kind: 'claimed' }
  /**
   * Redis lost its state (its meta hash is gone while the store has published events): every
   * published row was set back to PENDING, so the relay publishes everything again and the
   * consumer rebuilds every effect. `unrecoverable` events were pruned before the loss. With
   * partitions, only the partitions that lost their state are rebuilt (`partitions` names them).
   */
  | { kind: 'rebuilt'; republished: number; unrecoverable: number; unrecoverableAggregates: number; partitions?: number[] };

/** Rows set back to PENDING per transaction, so a producer never waits long for the write lock. */
const RESET_CHUNK = 10_000;

/** The one-line refusal of a pair that does not belong together, naming both stores and where they are. */
export function mismatch(db: Db, redis: Redis, storeId: string, servedStore: string): StoreMismatchError {
  return new StoreMismatchError(storeId, servedStore, { database: db.name, redis: describeRedis(redis) });
}

/** The store id this Redis serves, or null when its meta hash is gone. */
export async function servedStore(redis: Redis): Promise<string | null> {
  return redis.hget(keys.meta, 'store');
}

/**
 * Per partition, the store it serves (null: it lost its state, or was never used); throws when one
 * serves another store, or was claimed as part of another number of partitions.
 */
export async function servedStores(partitions: Partitions, storeId: string, refuse: (redis: Redis, served: string) => Error): Promise<(string | null)[]> {
  return Promise.all(
    partitions.clients.map(async (redis, index) => {
      const [served, layout] = await redis.hmget(keys.meta, 'store', 'partition');
      if (served !== null && served !== storeId) throw refuse(redis, served);
      const expected = partitionLayout(index, partitions.count);
      if (served !== null && (layout ?? '0/1') !== expected) throw layoutMismatch(redis, expected, layout ?? '0/1');
      return served;
    }),
  );
}

/** What the store says of its history, for `assertNotBehind`. */
export interface StoreHistory {
  /** The event id of outbox row `id`; null when there is no such row. */
  eventOfRow(id: number): Promise<string | null>;
  /** The seq `aggregate` was pruned through (outbox_pruned); 0 when none of its events was pruned. */
  prunedThrough(aggregate: string): Promise<number>;
  /** Whether the store holds the event `eventId` (any status). */
  holds(eventId: string): Promise<boolean>;
  /** Each of `aggregates`' last seq in the store (outbox_aggregates); absent when it has none. */
  lastSeqs(aggregates: string[]): Promise<Map<string, number>>;
  /** The refusal (`StoreBehindError`), naming the store and the Redis; `found` says what shows it, given the store's name. */
  behind(redis: Redis, found: (database: string) => string): Error | Promise<Error>;
}

/**
 * Throws when the store is behind a Redis (partition) that serves it (`behindEvidence`): the
 * highest row pushed there or the latest push's (the meta hash's 'pushedId', 'pushedEvent',
 * 'pushedAggregate' and 'pushedSeq', 'latestId' …, recorded by push-events-3.lua) is another event
 * in the store now, or is gone without its prune recorded (outbox_pruned: its aggregate pruned
 * through its seq), or the consumer met an event of the store at a seq another event took ('taken…',
 * recorded by apply-events-14.lua). Then the store lost events Redis has
 * applied (app.db restored from an older backup of itself, a PostgreSQL dump restored, a power loss
 * under `synchronous=NORMAL`), and its next events would reuse their ids or seqs and be skipped as
 * their duplicates. A partition that never took a push with a row (or whose Redis lost its state)
 * has nothing to compare. (Not the id sequence: a dump can hold a sequence ahead of its rows.)
 */
export async function assertNotBehind(partitions: Partitions, history: StoreHistory): Promise<void> {
  const [first] = await partitionsAhead(partitions, history);
  if (first) throw first.error;
}

/** The partitions the store is behind (see `assertNotBehind`), each with its refusal; none when it is behind none. */
export async function partitionsAhead(partitions: Partitions, history: StoreHistory): Promise<{ index: number; error: Error }[]> {
  const pushed = await Promise.all(partitions.clients.map((redis) => redis.hmget(keys.meta, ...EVIDENCE_FIELDS)));
  const ahead: { index: number; error: Error }[] = [];
  for (const [index, values] of pushed.entries()) {
    const evidence = await behindEvidence(Object.fromEntries(EVIDENCE_FIELDS.map((field, i) => [field, values[i]])), history);
    if (evidence !== null) ahead.push({ index, error: await history.behind(partitions.clients[index], (database) => describeEvidence(evidence, database)) });
  }
  return ahead;
}

/**
 * The meta hash's record of the rows pushed to a partition (push-events-3.lua: the highest, and the
 * latest call's), and of the last event the consumer found at a seq another event took (apply-events-14.lua).
 */
const EVIDENCE_FIELDS = [
  'pushedId', 'pushedEvent', 'pushedAggregate', 'pushedSeq',
  'latestId', 'latestEvent', 'latestAggregate', 'latestSeq',
  'takenEvent', 'takenAggregate', 'takenSeq',
] as const;

/** Those fields of a partition's meta hash (a field is null or absent when nothing was recorded). */
export type EvidenceFields = Partial<Record<(typeof EVIDENCE_FIELDS)[number], string | null>>;

/** What shows the store behind a partition: a row pushed there that the store lost, or an event of the store the consumer found at a seq another event took. */
export type BehindEvidence =
  | { kind: 'row'; rowId: number; pushedEvent: string; storeEvent: string | null }
  | { kind: 'taken'; aggregate: string; seq: number; event: string }
  | { kind: 'aggregate'; aggregate: string; applied: number; last: number };

/** One clause for the refusal and `status`: `database` names the store. */
export function describeEvidence(evidence: BehindEvidence, database: string): string {
  if (evidence.kind === 'taken') return `Redis applied another event at ${evidence.aggregate} seq ${evidence.seq}, and ${database} holds ${evidence.event} there`;
  if (evidence.kind === 'aggregate') return `Redis applied ${evidence.aggregate} through seq ${evidence.applied}, and ${database} holds it through seq ${evidence.last}`;
  const now = evidence.storeEvent === null ? 'no longer holds it' : `now holds ${evidence.storeEvent} there`;
  return `Redis was pushed outbox row ${evidence.rowId} as event ${evidence.pushedEvent}, and ${database} ${now}`;
}

/**
 * What shows the store behind a partition (`meta`: its meta hash, or those fields of it), or null:
 * the highest row pushed there, then the latest call's (on PostgreSQL a row that committed late is
 * pushed after higher ids, and a dump taken before its commit lacks it while it holds the highest),
 * when the store holds another event at that id, or lost it without recording its prune; else the
 * event the consumer found at a taken seq, when the store holds it (one it does not hold is a stale
 * message of another history: a pruned event's copy left in the queue by a partial loss).
 */
export async function behindEvidence(meta: EvidenceFields, history: StoreHistory): Promise<BehindEvidence | null> {
  const rows = [
    [meta.pushedId, meta.pushedEvent, meta.pushedAggregate, meta.pushedSeq],
    [meta.latestId, meta.latestEvent, meta.latestAggregate, meta.latestSeq],
  ];
  for (const [id, pushedEvent, aggregate, seq] of rows) {
    if (id == null || pushedEvent == null || aggregate == null || seq == null) continue;
    const rowId = Number(id);
    const storeEvent = await history.eventOfRow(rowId);
    if (storeEvent === pushedEvent) continue;
    if (storeEvent === null && (await history.prunedThrough(aggregate)) >= Number(seq)) continue;
    return { kind: 'row', rowId, pushedEvent, storeEvent };
  }
  const { takenEvent: event, takenAggregate: aggregate, takenSeq: seq } = meta;
  if (event != null && aggregate != null && seq != null && (await history.holds(event))) return { kind: 'taken', aggregate, seq: Number(seq), event };
  return null;
}

/** app.db's history: its rows by id, and what prune deleted. */
export function sqliteHistory(db: Db): StoreHistory {
  return {
    eventOfRow: async (id) => (db.prepare<[number], string>('SELECT event_id FROM outbox WHERE id = ?').pluck().get(id) ?? null),
    prunedThrough: async (aggregate) => (db.prepare<[string], number>('SELECT through_seq FROM outbox_pruned WHERE aggregate_id = ?').pluck().get(aggregate) ?? 0),
    holds: async (eventId) => db.prepare<[string], number>('SELECT 1 FROM outbox WHERE event_id = ?').pluck().get(eventId) === 1,
    lastSeqs: async (aggregates) =>
      new Map(
        db
          .prepare<[string], { aggregate_id: string; last_seq: number }>('SELECT aggregate_id, last_seq FROM outbox_aggregates WHERE aggregate_id IN (SELECT value FROM json_each(?))')
          .all(JSON.stringify(aggregates))
          .map((row) => [row.aggregate_id, row.last_seq]),
      ),
    behind: (redis, found) => new StoreBehindError(found(db.name), { database: db.name, redis: describeRedis(redis) }),
  };
}

/** Throws when Redis serves a store other than app.db's; resolves the store it serves (null: none, in any partition). */
export async function assertSameStore(db: Db, redis: Redis | Partitions): Promise<string | null> {
  const storeId = storeIdOf(db);
  const served = await servedStores(partitionsOf(redis), storeId, (r, s) => mismatch(db, r, storeId, s));
  return served.includes(null) ? null : storeId;
}

/** What pairing needs of a store (app.db or PostgreSQL), besides Redis. */
export interface PairingStore {
  storeId: string;
  /** Whether any event was ever published (then an empty Redis lost its state). */
  hasPublished(): Promise<boolean>;
  /**
   * Sets the PUBLISHED rows of the aggregates `inLost` accepts back to PENDING (all of them when
   * `inLost` is undefined) and bumps the replay generation, committed before the claims; resolves how many.
   */
  resetPublished(inLost?: (aggregate: string) => boolean): Promise<number>;
  /** Every pruned aggregate: the seq it was pruned through and how many events. */
  pruned(): Promise<{ aggregate_id: string; through_seq: number; events: number }[]>;
  /** Counts the rebuild in the store's meta. */
  recordRebuild(): Promise<void>;
  /** The refusal when a partition serves another store. */
  refuse(redis: Redis, served: string): Error;
}

/**
 * Makes every partition serve the store. A partition that serves none: on first use (the store
 * never published) it is claimed; otherwise it lost its state and is rebuilt: the published rows of
 * its aggregates go back to PENDING (committed first, so a crash half-way only repeats the rebuild),
 * its dedupe markers are deleted, and the claim deletes whatever consumer state a partial loss left
 * (it would double effects or skip events) and gives its pruned aggregates their applied seq (their
 * later events can be applied; the pruned ones' effects are gone and recorded as unrecoverable).
 * Partitions that kept their state are left alone.
 */
export async function pairPartitions(store: PairingStore, partitions: Partitions): Promise<Pairing> {
  const { storeId } = store;
  await checkPartitionLayout(partitions);
  const served = await servedStores(partitions, storeId, store.refuse);
  const lost = served.flatMap((s, index) => (s === null ? [index] : []));
  if (lost.length === 0) return { kind: 'paired' };
  // No consumer applies while a partition serves no store: a marker left without its effect would skip the event.
  for (const index of lost) {
    const redis = partitions.clients[index];
    await unlinkAll(redis, scanKeys(redis, keys.seen('*')));
  }
  const claim = async (index: number, rebuild?: Parameters<typeof claimStore>[2]) => {
    const redis = partitions.clients[index];
    const { servedStore: now } = await claimStore(redis, storeId, rebuild, partitionLayout(index, partitions.count));
    if (now !== storeId) throw store.refuse(redis, now);
  };
  if (!(await store.hasPublished())) {
    for (const index of lost) await claim(index);
    return { kind: 'claimed' };
  }
  const lostSet = new Set(lost);
  const inLost = lost.length === partitions.count ? undefined : (aggregate: string) => lostSet.has(partitionOf(aggregate, partitions.count));
  const republished = await store.resetPublished(inLost);
  const pruned = (await store.pruned()).filter((p) => inLost === undefined || inLost(p.aggregate_id));
  const unrecoverable = pruned.reduce((n, p) => n + p.events, 0);
  for (const index of lost) {
    const mine = pruned.filter((p) => partitionOf(p.aggregate_id, partitions.count) === index);
    // Each partition records what was republished and lost for the whole rebuild, once.
    await claim(index, { republished, unrecoverable: mine.reduce((n, p) => n + p.events, 0), pruned: mine });
  }
  await store.recordRebuild();
  return { kind: 'rebuilt', republished, unrecoverable, unrecoverableAggregates: pruned.length, ...(partitions.count > 1 ? { partitions: lost } : {}) };
}

/** Sets the matching PUBLISHED rows back to PENDING, in chunks by id; resolves how many. */
function resetPublished(db: Db, inLost?: (aggregate: string) => boolean): number {
  const maxId = (db.prepare('SELECT MAX(id) FROM outbox').pluck().get() as number | null) ?? 0;
  if (inLost) db.function('outbox_in_lost_partition', { deterministic: true }, (aggregate) => (inLost(String(aggregate)) ? 1 : 0));
  const reset = db.prepare<[number, number]>(
    "UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE id > ? AND id <= ? AND status = 'PUBLISHED'" +
      (inLost ? ' AND outbox_in_lost_partition(aggregate_id) = 1' : ''),
  );
  const chunk = db.transaction((from: number) => {
    bumpReplayGeneration(db);
    return reset.run(from, from + RESET_CHUNK).changes;
  });
  let total = 0;
  for (let from = 0; from < maxId; from += RESET_CHUNK) total += chunk.immediate(from);
  return total;
}

/** app.db as pairing sees it. */
function sqlitePairingStore(db: Db): PairingStore {
  const storeId = storeIdOf(db);
  return {
    storeId,
    hasPublished: async () => hasPublished(db),
    resetPublished: async (inLost) => resetPublished(db, inLost),
    pruned: async () => db.prepare<[], { aggregate_id: string; through_seq: number; events: number }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned').all(),
    recordRebuild: async () => {
      db.transaction(() => {
        db.prepare("INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilds', '1') ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1").run();
        db.prepare("INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilt_at', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value").run(String(Date.now()));
      }).immediate();
    },
    refuse: (redis, served) => mismatch(db, redis, storeId, served),
  };
}

/**
 * Makes sure Redis (every partition of it) serves app.db's store before the relay pushes: see
 * `pairPartitions`; refuses an app.db that is behind it (`assertNotBehind`). `assertLive` is called
 * before a claim: a relay whose app.db was replaced must not claim.
 */
export async function ensurePaired(db: Db, redis: Redis | Partitions, assertLive: () => void = () => {}): Promise<Pairing> {
  const partitions = partitionsOf(redis);
  const store = sqlitePairingStore(db);
  const served = await servedStores(partitions, store.storeId, store.refuse);
  await assertNotBehind(partitions, sqliteHistory(db));
  if (!served.includes(null)) return { kind: 'paired' };
  assertLive();
  return pairPartitions(store, partitions);
}

/** One line for logs and the CLI. `source`: the store the rebuild reads, as named in the line. */
export function describePairing(pairing: Exclude<Pairing, { kind: 'paired' }>, source = 'SQLite'): string {
  if (pairing.kind === 'claimed') return 'this Redis now serves the store';
  const lost =
    pairing.unrecoverable > 0
      ? `; ${pairing.unrecoverable} event(s) of ${pairing.unrecoverableAggregates} aggregate(s) were pruned before the loss: their effects cannot be rebuilt (verify names them)`
      : '';
  const which = pairing.partitions ? ` (partition${pairing.partitions.length > 1 ? 's' : ''} ${pairing.partitions.join(', ')})` : '';
  return `Redis lost its state${which}: rebuilding it from ${source}, ${pairing.republished} published event(s) set back to PENDING to be applied again${lost}`;
}
