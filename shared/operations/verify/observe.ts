import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { eventIdOf, type OutboxRow } from '../../outbox/store/events.js';
import { hasPublished, storeIdOf } from '../../outbox/store/store-meta.js';
import { keys } from '../../outbox/redis/keys.js';
import { bucketKey, GUARD_BUCKETS, guardKeyOf, guardsOfReplies, queueGuardReads } from '../../outbox/redis/guards.js';
import type { VerifiedEvent, VerifyCheckSet, VerifyProducer } from '../../outbox/verify/verify-checks.js';
import { recordedProcessingLists, scannedProcessingLists } from '../../outbox/redis/processing-lists.js';
import { readEnvelope } from '../../outbox/redis/envelope.js';
import { readList, readListBackwards } from '../../outbox/redis/read-list.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { sqliteHistory, type StoreHistory } from '../../outbox/relay/store-pairing.js';
import { guardDropped, mayBeSwept, readWindow, WINDOW_FIELDS, windowStateOf, type WindowState } from '../../outbox/redis/dedupe-window.js';

const CHUNK = 1000;

/** An outbox event as the checks need it. */
export interface ObservedEvent {
  id: number;
  event_id: string;
  /** The aggregate key, e.g. `order:7`. */
  aggregate_id: string;
  seq: number;
  status: string;
  /** Commit time (ms): an event committed at or before a partition's `sweptThrough` may have had its records swept. */
  created_at: number;
}

/** An event beyond the horizon (committed after the first snapshot), with its payload for the check set's effects. */
export interface NewerEvent {
  id: number;
  event_id: string;
  aggregate_id: string;
  seq: number;
  event: VerifiedEvent;
}

/** What a check set's `snapshot.producer` returned in S1, or what it threw. */
export type ProducerSnapshot = { value: unknown } | { error: unknown };

/**
 * One look at both stores, in the order that makes an event in flight look in flight (see
 * `observe`). The checks in verify.ts compare what SQLite held up to `horizon` with the Redis state
 * at one instant, `appliedCounter`, corrected for the newer events Redis had applied by then.
 */
export interface Observation
  extends Omit<ConsumerState, 'meta' | 'appliedCounter' | 'seqCounters' | 'window'>,
    Omit<ProducerRead, 'maxId'> {
  // The ProducerRead fields: SQLite (or PostgreSQL), one read transaction (S1).
  /** Events beyond the horizon: in S1, and committed after S1 up to the second SQLite read (S2). */
  newer: NewerEvent[];
  // Redis, one MULTI per partition: each partition's consumer state at one instant. Below, the
  // hashes of every partition merged (summed for counters); `partitionStates` keeps each one's own.
  /** P: how many partitions (1: one Redis, the seed's keys). */
  partitionCount: number;
  /** Each partition's consumer state, as read. */
  partitionStates: ConsumerState[];
  /** The stats hashes' `applied` counter of each partition at its instant: its entries with applyOrder <= it were applied by then. */
  appliedCounters: number[];
  // The ConsumerState fields (processedCount, applyCounts, appliedSeqs, counters: the check set's
  // counter hashes, each field summed over the partitions; stats, parked, dead): merged.
  // Redis, read after S1 and before the MULTI.
  // `dead`: the event ids in the dead-letter lists, set aside until an operator retries them.
  flight: { ids: Set<string>; queued: number; processing: number; dead: Set<string> };
  // Redis, read after the MULTI: the processed entries of `events` and `newer`, in their order.
  processed: (string | null)[];
  processedNewer: (string | null)[];
  /**
   * Each partition's window hash, read after the processed entries and apply counts: a record
   * missing from those reads and swept meanwhile was swept by then, so its event is under `sweptThrough`.
   */
  windows: WindowState[];
  /**
   * Per event of `events`: applied, its records swept by the dedupe window (no processed entry, no
   * apply count, seq at or below its aggregate's applied seq, committed at or before `sweptThrough`,
   * in a partition that serves the store). Beyond the window the seq guard is the evidence.
   */
  swept: boolean[];
}

/** Looks up `fields` in a hash in chunks; resolves the values in the same order. */
async function hashValues(redis: Redis, key: string, fields: string[]): Promise<(string | null)[]> {
  const chunks: Promise<(string | null)[]>[] = [];
  for (let i = 0; i < fields.length; i += CHUNK) chunks.push(redis.hmget(key, ...fields.slice(i, i + CHUNK)));
  return (await Promise.all(chunks)).flat();
}

/** Event ids on their way in a list of any partition: queued or in a processing list (parked ones are added later). */
async function inFlight(partitions: Partitions, scanLists: boolean): Promise<Observation['flight']> {
  const flights = await Promise.all(partitions.clients.map((redis) => inFlightIn(redis, scanLists)));
  return {
    ids: new Set(flights.flatMap((f) => [...f.ids])),
    queued: flights.reduce((n, f) => n + f.queued, 0),
    processing: flights.reduce((n, f) => n + f.processing, 0),
    dead: new Set(flights.flatMap((f) => [...f.dead])),
  };
}

/**
 * Event ids on their way in one partition's lists: the queue, and the processing lists the takes
 * recorded, or with `scanLists` every one a SCAN finds (a list no take recorded is one a consumer
 * left when it died after the set of lists was lost).
 */
async function inFlightIn(redis: Redis, scanLists: boolean): Promise<Observation['flight']> {
  const ids = new Set<string>();
  const add = (message: string) => {
    const id = eventIdOf(message);
    if (id) ids.add(id);
  };
  let queued = 0;
  let processing = 0;
  // The queue before the processing lists, and their names after it: a take moves a message from
  // the one to the other in the step that records its list's name. Each read back to front, so
  // that the consumers' takes and acks at the heads skip nothing.
  for await (const message of readListBackwards(redis, keys.events)) {
    queued += 1;
    add(message);
  }
  for (const list of scanLists ? await scannedProcessingLists(redis) : await recordedProcessingLists(redis)) {
    for await (const message of readListBackwards(redis, list)) {
      processing += 1;
      add(message);
    }
  }
  const dead = new Set<string>();
  for await (const entry of readList(redis, keys.deadLetter)) {
    const message = readEnvelope(entry)?.message;
    const id = message === undefined ? undefined : eventIdOf(message);
    if (id) dead.add(id);
  }
  return { ids, queued, processing, dead };
}

/** An event beyond the horizon; a payload that is not JSON is passed on as its text. */
export function newerEvent(row: OutboxRow): NewerEvent {
  let payload: unknown = row.payload;
  try {
    payload = JSON.parse(row.payload);
  } catch {
    // Kept as text: the check set's effects decide what it means.
  }
  return {
    id: row.id,
    event_id: row.event_id,
    aggregate_id: row.aggregate_id,
    seq: row.seq,
    event: { eventId: row.event_id, aggregate: row.aggregate_id, seq: row.seq, type: row.event_type, payload },
  };
}

const NEWER_ROWS = 'SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE id > ? ORDER BY id';

/** A row of outbox_pruned. */
export interface PrunedAggregate {
  key: string;
  throughSeq: number;
  events: number;
}

/** S1: what the checks read from the producer's database in one consistent snapshot. */
export interface ProducerRead {
  /** The highest outbox id the checks cover: the newest row of the first snapshot. */
  horizon: number;
  /** The highest outbox id in S1 (S2 reads the rows above it). */
  maxId: number;
  pruned: number;
  /** Every pruned aggregate: the seq it was pruned through and how many of its events were pruned. */
  prunedThrough: PrunedAggregate[];
  /** PENDING rows up to the horizon; `pendingNewer`: beyond it. */
  pending: number[];
  pendingNewer: number;
  /** Events up to the horizon, ordered by aggregate and seq. */
  events: ObservedEvent[];
  /**
   * Aggregates with their last seq up to the horizon (outbox_aggregates' last seq minus newer events)
   * and their last event's commit time (0: not kept), which tells a guard the aggregate horizon dropped.
   */
  aggregates: { key: string; lastSeq: number; lastAt: number }[];
  /** The check set's own read in S1 (none without a check set that has one). */
  producerSnapshot: ProducerSnapshot;
  /** Events beyond the horizon in S1 (what S1, and so `producerSnapshot`, holds beyond it). */
  newerInSnapshot: NewerEvent[];
}

/** What S1 reads as it is, on either store, before `producerRead` cuts it at the horizon. */
export interface RawProducerRead {
  horizon: number;
  maxId: number;
  pruned: number;
  prunedThrough: PrunedAggregate[];
  /** Every PENDING row, in id order. */
  pendingRows: number[];
  /** Every event, ordered by aggregate and seq. */
  all: ObservedEvent[];
  /** The rows beyond the horizon. */
  newer: NewerEvent[];
  /** outbox_aggregates, ordered by aggregate. */
  lastSeqs: { key: string; lastSeq: number; lastAt: number }[];
  producerSnapshot: ProducerSnapshot;
}

/** S1 cut at its horizon: what the checks compare (the same for app.db and PostgreSQL). */
export function producerRead({ horizon, maxId, pruned, prunedThrough, pendingRows, all, newer, lastSeqs, producerSnapshot }: RawProducerRead): ProducerRead {
  const newerPerAggregate = new Map<string, number>();
  for (const e of newer) newerPerAggregate.set(e.aggregate_id, (newerPerAggregate.get(e.aggregate_id) ?? 0) + 1);
  const aggregates = lastSeqs
    .map((a) => ({ key: a.key, lastSeq: a.lastSeq - (newerPerAggregate.get(a.key) ?? 0), lastAt: a.lastAt }))
    .filter((a) => a.lastSeq > 0 || !newerPerAggregate.has(a.key));
  return {
    horizon,
    maxId,
    pruned,
    prunedThrough,
    pending: pendingRows.filter((id) => id <= horizon),
    pendingNewer: pendingRows.filter((id) => id > horizon).length,
    events: all.filter((e) => e.id <= horizon),
    aggregates,
    producerSnapshot,
    newerInSnapshot: newer,
  };
}

/**
 * What verify reads of the producer's database, whichever it is: app.db (`sqliteVerifyReads`) or
 * PostgreSQL (`pgVerifyReads`, shared/operations/verify/pg-verify-reads.ts).
 */
export interface VerifyReads {
  /** S1, in one read transaction, the check set's own read included. */
  snapshot(horizon: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): Promise<ProducerRead>;
  /** The rows committed with an id above `id` (S2). */
  newerThan(id: number): Promise<NewerEvent[]>;
  /** Of these events, the ones whose rows are PENDING. */
  pendingOf(eventIds: string[]): Promise<Set<string>>;
  /** Of these events, the rows that are PUBLISHED. */
  publishedRowsOf(eventIds: string[]): Promise<OutboxRow[]>;
  /** Of these events, the ones the store holds (any status). */
  heldOf(eventIds: string[]): Promise<Set<string>>;
  storeId(): Promise<string>;
  hasPublished(): Promise<boolean>;
  /** The first pruned aggregates, `<key> seq 1-<n>`. */
  prunedAggregates(limit: number): Promise<string[]>;
  /** The store, and what a check set gets as `producer`. */
  producer: VerifyProducer;
  /** Its rows by id and what prune deleted: whether it is behind a Redis that serves it (see `partitionsAhead`). */
  history: StoreHistory;
}

/** The reads of app.db. */
export function sqliteVerifyReads(db: Db): VerifyReads {
  return {
    snapshot: async (horizon, checkSet) => readSqlite(db, horizon, checkSet),
    newerThan: async (id) => db.prepare<[number], OutboxRow>(NEWER_ROWS).all(id).map(newerEvent),
    pendingOf: async (eventIds) =>
      new Set(
        db
          .prepare<[string], { event_id: string }>("SELECT event_id FROM outbox WHERE status = 'PENDING' AND event_id IN (SELECT value FROM json_each(?))")
          .all(JSON.stringify(eventIds))
          .map((r) => r.event_id),
      ),
    publishedRowsOf: async (eventIds) =>
      db
        .prepare<[string], OutboxRow>("SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE status = 'PUBLISHED' AND event_id IN (SELECT value FROM json_each(?))")
        .all(JSON.stringify(eventIds)),
    heldOf: async (eventIds) => new Set(db.prepare<[string], string>('SELECT event_id FROM outbox WHERE event_id IN (SELECT value FROM json_each(?))').pluck().all(JSON.stringify(eventIds))),
    storeId: async () => storeIdOf(db),
    hasPublished: async () => hasPublished(db),
    prunedAggregates: async (limit) =>
      db
        .prepare<[], { aggregate_id: string; through_seq: number }>(`SELECT aggregate_id, through_seq FROM outbox_pruned ORDER BY aggregate_id LIMIT ${limit}`)
        .all()
        .map((p) => `${p.aggregate_id} seq 1-${p.through_seq}`),
    producer: { store: 'sqlite', producer: db },
    history: sqliteHistory(db),
  };
}

/** `db`, or reads of another store, as verify's reads. */
export const verifyReadsOf = (store: Db | VerifyReads): VerifyReads => ('prepare' in store ? sqliteVerifyReads(store) : store);

/** S1: everything the checks read from SQLite, in one read transaction (one consistent snapshot), the check set's own read included. */
function readSqlite(db: Db, horizonOrNone: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): ProducerRead {
  return db.transaction(() => {
    const maxId = db.prepare<[], { m: number | null }>('SELECT MAX(id) AS m FROM outbox').get()!.m ?? 0;
    const horizon = horizonOrNone ?? maxId;
    const pruned = db.prepare<[], { n: number }>('SELECT COALESCE(SUM(events), 0) AS n FROM outbox_pruned').get()!.n;
    const prunedThrough = db.prepare<[], PrunedAggregate>('SELECT aggregate_id AS key, through_seq AS throughSeq, events FROM outbox_pruned').all();
    const pendingRows = db.prepare<[], { id: number }>("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id").all().map((p) => p.id);
    // Ordered by aggregate and seq, for the out-of-order check.
    const all = db
      .prepare<[], ObservedEvent>(
        'SELECT id, event_id, aggregate_id, seq, status, created_at FROM outbox ORDER BY aggregate_id, seq',
      )
      .all();
    const newer = db.prepare<[number], OutboxRow>(NEWER_ROWS).all(horizon).map(newerEvent);
    const lastSeqs = db
      .prepare<[], { key: string; lastSeq: number; lastAt: number }>('SELECT aggregate_id AS key, last_seq AS lastSeq, last_at AS lastAt FROM outbox_aggregates ORDER BY aggregate_id')
      .all();
    return producerRead({ horizon, maxId, pruned, prunedThrough, pendingRows, all, newer, lastSeqs, producerSnapshot: producerSnapshotOf(db, checkSet) });
  })();
}

/** The check set's read of the producer, inside S1; a throw is kept for its check rows, not thrown. */
function producerSnapshotOf(db: Db, checkSet: VerifyCheckSet<unknown> | undefined): ProducerSnapshot {
  const read = checkSet?.snapshot?.producer;
  if (read === undefined) return { value: undefined };
  try {
    return { value: read(db) };
  } catch (error) {
    return { error };
  }
}

/**
 * Runs a MULTI and resolves its replies, throwing the first error. A MULTI's errors carry no
 * command: `keyOf(i)` names the key of its i-th, which a WRONGTYPE error then names (explainError).
 */
async function execAll(multi: ReturnType<Redis['multi']>, keyOf: (i: number) => string): Promise<unknown[]> {
  return (await multi.exec())!.map(([error, value], i) => {
    if (error) throw Object.assign(error, { command: { name: 'multi', args: [keyOf(i)] } });
    return value;
  });
}

/** One partition's consumer state: its MULTI's instant, and what is read around it (see `observe`). */
export interface ConsumerState {
  meta: Record<string, string>;
  processedCount: number;
  /** The apply counts of the snapshot's events that have one (HMGET in chunks, after the processed entries). */
  applyCounts: Record<string, string>;
  /**
   * The applied seqs of the store's aggregates (HMGET in chunks after the MULTI), and of any other
   * the hash holds (HSCAN, only when its length says there is one).
   */
  appliedSeqs: Record<string, string>;
  /** The applied counter when each aggregate's applied seq was read, where it differs from `appliedCounter`. */
  seqCounters: Map<string, number>;
  counters: Record<string, Record<string, string>>;
  stats: Record<string, string>;
  /** The parked hash, read by HSCAN after the lists and before the MULTI. */
  parked: Record<string, string>;
  dead: number;
  appliedCounter: number;
  /** The window hash at the MULTI: its `sweptEvents` are applied events that left the processed count. */
  window: WindowState;
}


/** Every field of a hash by HSCAN (COUNT 1000 a call: no call holds Redis long). */
async function scanHash(redis: Redis, key: string): Promise<Record<string, string>> {
  const hash: Record<string, string> = {};
  let cursor = '0';
  do {
    const [next, entries] = await redis.hscan(key, cursor, 'COUNT', CHUNK);
    for (let i = 0; i < entries.length; i += 2) hash[entries[i]] = entries[i + 1];
    cursor = next;
  } while (cursor !== '0');
  return hash;
}

/**
 * The consumer's state at one instant, in one MULTI of small reads: the processed count and the
 * window's swept count (which the sweep moves together), the stats hash's `applied` counter N and
 * the check set's counter hashes. The hashes that grow with history are read after it, in chunks.
 */
async function readConsumerState(
  redis: Redis,
  counterHashes: readonly string[],
  parked: Record<string, string>,
): Promise<ConsumerState> {
  const multi = redis
    .multi()
    .hgetall(keys.meta)
    .hlen(keys.processed)
    .hgetall(keys.stats)
    .llen(keys.deadLetter)
    .hmget(keys.window, ...WINDOW_FIELDS);
  for (const key of counterHashes) multi.hgetall(key);
  const read = [keys.meta, keys.processed, keys.stats, keys.deadLetter, keys.window, ...counterHashes];
  const values = await execAll(multi, (i) => read[i]);
  const [meta, processedCount, stats, dead, window, ...counterValues] = values as [
    Record<string, string>,
    number,
    Record<string, string>,
    number,
    (string | null)[],
    ...Record<string, string>[],
  ];
  const counters = Object.fromEntries(counterHashes.map((key, i) => [key, counterValues[i]]));
  return {
    meta,
    processedCount,
    applyCounts: {},
    appliedSeqs: {},
    seqCounters: new Map(),
    counters,
    stats,
    parked,
    dead,
    appliedCounter: appliedCounterOf(stats.applied),
    window: windowStateOf(window),
  };
}

function appliedCounterOf(text: string | null | undefined): number {
  const counter = Number(text ?? 0);
  return Number.isFinite(counter) ? counter : Infinity;
}

/**
 * Reads into `state` the applied seqs of `aggregates` (HMGET of at most 1000 a call), each chunk in
 * a MULTI with the applied counter, so that an aggregate's seq is judged against the newer events
 * applied by its own read (`seqCounters`). The chunks are not one MULTI, which would hold Redis for
 * the whole hash: each is exact at its instant, and a guard only rises, so a seq read after the main
 * MULTI can hide no fault that one read at it shows (a guard behind, a parked event, a taken seq).
 * When the hash holds more aggregates than were found among these (its length at the last chunk),
 * it is scanned for the others: the store does not hold them (see `aggregatesPastStore`).
 */
async function readAppliedSeqs(redis: Redis, state: ConsumerState, aggregates: string[]): Promise<void> {
  let found = 0;
  let length = 0;
  const keep = (aggregate: string, seq: string, counter: number) => {
    state.appliedSeqs[aggregate] = seq;
    if (counter !== state.appliedCounter) state.seqCounters.set(aggregate, counter);
  };
  for (let first = 0; first === 0 || first < aggregates.length; first += CHUNK) {
    const chunk = aggregates.slice(first, first + CHUNK);
    const multi = redis.multi().hget(keys.stats, 'applied').hget(keys.window, 'guards').hlen(keys.appliedSeq);
    queueGuardReads(multi, chunk);
    const replies = await execAll(multi, (i) => (i === 0 ? keys.stats : i === 1 ? keys.window : keys.appliedSeq));
    const [counterText, counted, legacy] = replies as [string | null, string | null, number];
    const seqs = guardsOfReplies(replies.slice(3), chunk);
    const counter = appliedCounterOf(counterText);
    length = (Number(counted ?? 0) || 0) + legacy;
    chunk.forEach((aggregate, i) => {
      const seq = seqs[i];
      if (seq === null || seq === undefined) return;
      found += 1;
      keep(aggregate, seq, counter);
    });
  }
  if (length <= found) return;
  const known = new Set(aggregates);
  for (let first = 0; first < GUARD_BUCKETS; first += CHUNK / 4) {
    const multi = redis.multi().hget(keys.stats, 'applied');
    for (let i = first; i < first + CHUNK / 4; i += 1) multi.hgetall(bucketKey(i));
    const replies = await execAll(multi, (i) => (i === 0 ? keys.stats : keys.appliedSeq));
    const counter = appliedCounterOf(replies[0] as string | null);
    for (const bucket of replies.slice(1) as Record<string, string>[]) {
      for (const [aggregate, seq] of Object.entries(bucket)) if (!known.has(aggregate)) keep(aggregate, seq, counter);
    }
  }
  let cursor = '0';
  do {
    const multi = redis.multi().hget(keys.stats, 'applied').hscan(keys.appliedSeq, cursor, 'COUNT', CHUNK);
    const replies = await execAll(multi, (i) => [keys.stats, keys.appliedSeq][i]);
    const [counterText, [next, entries]] = replies as [string | null, [string, string[]]];
    const counter = appliedCounterOf(counterText);
    for (let i = 0; i < entries.length; i += 2) if (!known.has(entries[i])) keep(entries[i], entries[i + 1], counter);
    cursor = next;
  } while (cursor !== '0');
}

/** The apply counts of `eventIds` in one partition that has them (HMGET in chunks). */
async function readApplyCounts(redis: Redis, eventIds: string[]): Promise<Record<string, string>> {
  const counts: Record<string, string> = {};
  const values = await hashValues(redis, keys.applyCount, eventIds);
  values.forEach((value, i) => {
    if (value !== null) counts[eventIds[i]] = value;
  });
  return counts;
}

const INTEGER = /^-?\d+$/;

/** Hashes of counters summed field by field; a value that is not an integer is kept as it is (a corrupt entry, named per partition). */
function sumHashes(hashes: Record<string, string>[]): Record<string, string> {
  if (hashes.length === 1) return hashes[0];
  const sum: Record<string, string> = {};
  for (const hash of hashes) {
    for (const [field, value] of Object.entries(hash)) {
      const before = sum[field];
      sum[field] = before === undefined ? value : INTEGER.test(before) && INTEGER.test(value) ? String(Number(before) + Number(value)) : INTEGER.test(before) ? value : before;
    }
  }
  return sum;
}

/** The applied seqs of every partition: an aggregate's own partition's value wins over one found elsewhere. */
function mergeAppliedSeqs(states: ConsumerState[], partitionOfAggregate: (aggregate: string) => number): Record<string, string> {
  if (states.length === 1) return states[0].appliedSeqs;
  const merged: Record<string, string> = {};
  states.forEach((state, index) => {
    for (const [aggregate, seq] of Object.entries(state.appliedSeqs)) {
      if (merged[aggregate] === undefined || partitionOfAggregate(aggregate) === index) merged[aggregate] = seq;
    }
  });
  return merged;
}

/** The consumer states of the partitions, as one (see `Observation`). */
function mergeStates(partitions: Partitions, states: ConsumerState[], counterHashes: readonly string[]) {
  return {
    partitionCount: partitions.count,
    partitionStates: states,
    appliedCounters: states.map((s) => s.appliedCounter),
    processedCount: states.reduce((n, s) => n + s.processedCount, 0),
    applyCounts: sumHashes(states.map((s) => s.applyCounts)),
    appliedSeqs: mergeAppliedSeqs(states, partitions.indexOf),
    counters: Object.fromEntries(counterHashes.map((key) => [key, sumHashes(states.map((s) => s.counters[key]))])),
    stats: sumHashes(states.map((s) => s.stats)),
    parked: Object.assign({}, ...states.map((s) => s.parked)) as Record<string, string>,
    dead: states.reduce((n, s) => n + s.dead, 0),
  };
}

/** The processed entries of `events`, each read in its aggregate's partition, in their order. */
async function processedOf(partitions: Partitions, events: { event_id: string; aggregate_id: string }[]): Promise<(string | null)[]> {
  if (partitions.count === 1) return hashValues(partitions.clients[0], keys.processed, events.map((e) => e.event_id));
  const values: (string | null)[] = new Array(events.length).fill(null);
  const groups = new Map<number, number[]>();
  events.forEach((e, i) => {
    const index = partitions.indexOf(e.aggregate_id);
    const group = groups.get(index);
    if (group) group.push(i);
    else groups.set(index, [i]);
  });
  await Promise.all(
    [...groups].map(async ([index, positions]) => {
      const found = await hashValues(partitions.clients[index], keys.processed, positions.map((i) => events[i].event_id));
      positions.forEach((position, j) => (values[position] = found[j]));
    }),
  );
  return values;
}

/** Each partition's aggregates the store knows in S1 (last seqs, pruned, beyond the horizon) and the parked ones'. */
function aggregatesByPartition(partitions: Partitions, s1: ProducerRead, parked: Record<string, string>[]): string[][] {
  const sets = partitions.clients.map(() => new Set<string>());
  const add = (aggregate: string) => sets[partitions.count === 1 ? 0 : partitions.indexOf(aggregate)].add(aggregate);
  for (const a of s1.aggregates) add(a.key);
  for (const p of s1.prunedThrough) add(p.key);
  for (const e of s1.events) add(e.aggregate_id);
  for (const e of s1.newerInSnapshot) add(e.aggregate_id);
  for (const field of parked.flatMap((hash) => Object.keys(hash))) {
    if (field.lastIndexOf(':') > 0) add(field.slice(0, field.lastIndexOf(':')));
  }
  return sets.map((set) => [...set]);
}

/**
 * Looks at both stores, checking what SQLite held up to `horizon` (default: its newest row now).
 *
 * The order of the reads is what makes an event in flight look in flight and never lost, or an
 * effect that arrived early look like a bug:
 * 1. SQLite first (S1, one read transaction). An event moves forward only: PENDING, pushed, marked
 *    PUBLISHED, in a processing list, applied. The relay marks a row PUBLISHED only after Redis
 *    acknowledged its push, so a row PUBLISHED in S1 is, at any later instant, queued, in a
 *    processing list, parked or applied, unless it was really lost. Read the other way round (Redis,
 *    then SQLite), a row pushed and marked between the two reads would be in no list we saw and
 *    PUBLISHED: it would look lost.
 * 2. The lists, queue before processing lists (the way messages move), then the parked hash. These
 *    reads are not atomic (a long queue is read in chunks while the consumer takes from its head), so
 *    an event can slip past them; it is then not applied either, counts as in flight, and is checked
 *    again: a lost event is named only after it stayed unapplied through the settle window and one
 *    atomic look (`whereIs`) finds it nowhere.
 * 3. The consumer's state in one MULTI: the check set's counter hashes (the lab's inventory), the
 *    processed count with the window's swept count, and the `applied` counter N, all at one instant.
 *    Then the applied seqs, in chunks each read with the counter at its own instant (`readAppliedSeqs`).
 * 4. SQLite again (S2), for the rows committed since S1: every event Redis had applied by N (or by
 *    the applied seqs' last read) was committed before it, so S1 + S2 hold all of them and an early
 *    effect is never unexplained.
 * 5. The processed entries of every event, after the MULTI: an entry with applyOrder <= N was
 *    applied by the instant of step 3 (the apply script writes the entry and the counter in one
 *    step), so the counter hashes and the processed count are compared with exactly the events
 *    applied by then. The dedupe window's sweep removes entries, but only of events applied a window
 *    earlier, and counts them (`sweptEvents`) in the step that removes them: processed count + swept
 *    count at the MULTI counts every event applied by then. Then the apply counts, and last each
 *    partition's window hash: an event whose records are gone by then (swept) was committed at or
 *    before its `sweptThrough`, and its aggregate's applied seq is the evidence it was applied.
 *
 * With partitions, steps 2 and 3 are taken in every partition (its lists, then its MULTI) and step 5
 * reads each event in its aggregate's partition: an event is judged by its own partition's counter
 * at its own instant, and as each event's effects are written in its partition only, the counter
 * hashes summed over the partitions are exactly the effects of the events applied by those instants.
 */
export async function observe(store: Db | VerifyReads, redis: Redis | Partitions, horizon?: number, checkSet?: VerifyCheckSet<unknown>, scanLists = false): Promise<Observation> {
  const reads = verifyReadsOf(store);
  const partitions = partitionsOf(redis);
  const counterHashes = checkSet?.snapshot?.counterHashes ?? [];
  const s1 = await reads.snapshot(horizon, checkSet);
  // With partitions, each one's lists and parked hash before its MULTI: the order above holds in each.
  const flight = await inFlight(partitions, scanLists);
  const parked = await Promise.all(partitions.clients.map((client) => scanHash(client, keys.parked)));
  const { clients } = partitions;
  const states = await Promise.all(clients.map((client, i) => readConsumerState(client, counterHashes, parked[i])));
  const aggregates = aggregatesByPartition(partitions, s1, parked);
  await Promise.all(clients.map((client, index) => readAppliedSeqs(client, states[index], aggregates[index])));
  for (const envelope of parked.flatMap((hash) => Object.values(hash))) {
    const message = readEnvelope(envelope)?.message;
    const id = message === undefined ? undefined : eventIdOf(message);
    if (id) flight.ids.add(id);
  }
  const later = await reads.newerThan(s1.maxId);
  const newer = [...s1.newerInSnapshot, ...later];
  const [processed, processedNewer] = await Promise.all([processedOf(partitions, s1.events), processedOf(partitions, newer)]);
  // Every partition's count of an event, summed as before (an event applied in two partitions is applied twice).
  const eventIds = s1.events.map((e) => e.event_id);
  const counts = await Promise.all(partitions.clients.map((client) => readApplyCounts(client, eventIds)));
  counts.forEach((c, index) => (states[index].applyCounts = c));
  const windows = await Promise.all(clients.map(readWindow));
  const state = mergeStates(partitions, states, counterHashes);
  const swept = s1.events.map((e, i) => {
    const index = partitions.count === 1 ? 0 : partitions.indexOf(e.aggregate_id);
    const guard = state.appliedSeqs[e.aggregate_id];
    // No guard: past the aggregate horizon it was dropped, the event applied before that.
    const applied = guard === undefined ? guardDropped(e.created_at, windows[index]) : e.seq <= Number(guard) && mayBeSwept(e.created_at, windows[index]);
    return processed[i] === null && state.applyCounts[e.event_id] === undefined && states[index].meta.store !== undefined && applied;
  });
  return { ...s1, newer, ...state, flight, processed, processedNewer, windows, swept };
}

/** The applyOrder of a processed entry (0 when it has none); null for no entry. */
export function applyOrderOf(value: string | null): number | null {
  if (value === null) return null;
  try {
    const order = (JSON.parse(value) as { applyOrder?: unknown }).applyOrder;
    return typeof order === 'number' ? order : 0;
  } catch {
    return 0;
  }
}

/** Of these events, the ones not applied yet (in any partition) and the rows still PENDING: what a settle waits for. */
export async function stillInFlight(store: Db | VerifyReads, redis: Redis | Partitions, eventIds: string[]): Promise<string[]> {
  if (eventIds.length === 0) return [];
  const each = await Promise.all(partitionsOf(redis).clients.map((client) => hashValues(client, keys.processed, eventIds)));
  const pending = await verifyReadsOf(store).pendingOf(eventIds);
  return eventIds.filter((id, i) => each.every((values) => values[i] === null) || pending.has(id));
}

/** Messages the LPOS calls of one `whereIsAmong` MULTI walk at most (but always one event's lists whole). */
const LPOS_BUDGET = 100_000;

type Whereabouts = { event_id: string; aggregate_id: string; seq: number; message: string; created_at: number };

/**
 * Where each event is, in one atomic look (MULTI) at its aggregate's partition: applied, queued, in
 * a processing list or parked. Resolves the ids found nowhere. `messages` are the events' messages
 * exactly as the relay pushes them. An event whose records the dedupe window swept is applied (see
 * `Observation.swept`), judged by the applied seq and window hash of the same look.
 */
export async function whereIs(redis: Redis | Partitions, events: Whereabouts[]): Promise<string[]> {
  const partitions = partitionsOf(redis);
  if (partitions.count === 1) return whereIsIn(partitions.clients[0], events);
  const groups = byPartition(partitions, events, (e) => e.aggregate_id);
  const nowhere = new Set((await Promise.all([...groups].map(([index, group]) => whereIsIn(partitions.clients[index], group)))).flat());
  return events.map((e) => e.event_id).filter((id) => nowhere.has(id));
}

/**
 * `whereIs` in one partition: first among the processing lists the takes recorded; the events
 * found nowhere there are looked for again among every list a SCAN finds (one taken into a list
 * recorded after the first look, or in a list no take recorded), so that the keyspace is walked only
 * when something is unaccounted for.
 */
async function whereIsIn(redis: Redis, events: Whereabouts[]): Promise<string[]> {
  const first = await whereIsAmong(redis, events, await recordedProcessingLists(redis));
  if (first.length === 0) return first;
  const missing = new Set(first);
  return whereIsAmong(redis, events.filter((e) => missing.has(e.event_id)), await scannedProcessingLists(redis));
}

/**
 * The events found nowhere in one atomic look (MULTI) at the processed and parked hashes, the queue
 * and `processing`; nor swept (no apply count, seq within the applied seq, committed by `sweptThrough`).
 */
async function whereIsAmong(redis: Redis, events: Whereabouts[], processing: string[]): Promise<string[]> {
  const lists: string[] = [keys.events, ...processing];
  const nowhere: string[] = [];
  const read = [keys.processed, keys.parked, keys.applyCount, keys.appliedSeq, keys.appliedSeq, ...lists];
  const per = read.length;
  // Each LPOS walks its list: fewer events per MULTI when the lists are long (a backlog), so that one
  // MULTI walks about 100,000 messages at most (a few ms), one event's look always whole.
  const lengths = await Promise.all(lists.map((list) => redis.llen(list)));
  const step = Math.max(1, Math.min(50, Math.floor(LPOS_BUDGET / Math.max(1, lengths.reduce((n, l) => n + l, 0)))));
  for (let i = 0; i < events.length; i += step) {
    const chunk = events.slice(i, i + step);
    const multi = redis.multi().hmget(keys.window, ...WINDOW_FIELDS).hget(keys.meta, 'store');
    for (const e of chunk) {
      multi.hexists(keys.processed, e.event_id).hexists(keys.parked, `${e.aggregate_id}:${e.seq}`);
      multi.hexists(keys.applyCount, e.event_id).hget(guardKeyOf(e.aggregate_id), e.aggregate_id).hget(keys.appliedSeq, e.aggregate_id);
      for (const list of lists) multi.lpos(list, e.message);
    }
    const replies = await execAll(multi, (i) => (i === 0 ? keys.window : i === 1 ? keys.meta : read[(i - 2) % per]));
    const window = windowStateOf(replies[0] as (string | null)[]);
    const served = replies[1] !== null;
    chunk.forEach((e, j) => {
      const [applied, parked, counted, bucketSeq, legacySeq, ...positions] = replies.slice(2 + j * per, 2 + (j + 1) * per);
      const appliedSeq = bucketSeq ?? legacySeq;
      const swept = served && counted === 0 && e.seq <= Number(appliedSeq ?? 0) && mayBeSwept(e.created_at, window);
      if (applied === 0 && parked === 0 && !swept && positions.every((p) => p === null)) nowhere.push(e.event_id);
    });
  }
  return nowhere;
}
