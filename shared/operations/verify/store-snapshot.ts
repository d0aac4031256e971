import type Database from 'better-sqlite3';
import type { Db } from '../../outbox/store/open-database.js';
import type { OutboxRow } from '../../outbox/store/events.js';
import { hasPublished, storeIdOf } from '../../outbox/store/store-meta.js';
import type { VerifiedEvent, VerifyCheckSet, VerifyProducer } from '../../outbox/verify/verify-checks.js';
import { sqliteHistory, type StoreHistory } from '../../outbox/relay/store-pairing.js';
import { EXAMPLES } from '../../outbox/verify/verify-checks.js';

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

/** A row of outbox_pruned. */
export interface PrunedAggregate {
  key: string;
  throughSeq: number;
  events: number;
}

/** A row of outbox_aggregates: the aggregate's last seq and its last event's commit time (0: not kept). */
export interface AggregateRow {
  key: string;
  lastSeq: number;
  lastAt: number;
}

/** Rows in their order, a page at a time: an empty page at the end. */
export interface PageReader<T> {
  next(limit: number): Promise<T[]>;
}

/**
 * S1: one read transaction of the producer's database, held open while verify streams it (so that
 * every page is of the same snapshot), closed by `close`. What does not grow with history is read
 * at once; the rest (events, aggregates, pruned aggregates) page by page, each ordered by aggregate
 * key in byte order (SQLite's BINARY, PostgreSQL's COLLATE "C"), so that they merge.
 */
export interface StoreSnapshot {
  /** The highest outbox id the checks cover: the newest row of the first snapshot. */
  horizon: number;
  /** The highest outbox id in S1 (S2 reads the rows above it). */
  maxId: number;
  /** Events deleted by prune (outbox_pruned's sum). */
  pruned: number;
  /** PENDING rows up to the horizon: how many, and the first ids. */
  pending: number;
  pendingExamples: number[];
  /** PENDING rows beyond the horizon. */
  pendingNewer: number;
  /** Events beyond the horizon in S1 (what S1, and so `producerSnapshot`, holds beyond it). */
  newerInSnapshot: NewerEvent[];
  /** The check set's own read in S1 (none without a check set that has one). */
  producerSnapshot: ProducerSnapshot;
  /** Events up to the horizon, ordered by aggregate and seq. */
  events: PageReader<ObservedEvent>;
  /** outbox_aggregates, ordered by aggregate (not cut at the horizon). */
  aggregates: PageReader<AggregateRow>;
  /** outbox_pruned, ordered by aggregate. */
  prunedRows: PageReader<PrunedAggregate>;
  /** A new reader of outbox_pruned from its start (a second pass). */
  prunedAgain(): PageReader<PrunedAggregate>;
  /** Of these aggregates, those S1 holds: a row of outbox_aggregates or outbox_pruned, or an event up to the horizon. */
  known(keys: string[]): Promise<Set<string>>;
  close(): Promise<void>;
}

/**
 * What verify reads of the producer's database, whichever it is: app.db (`sqliteVerifyReads`) or
 * PostgreSQL (`pgVerifyReads`, pg-verify-reads.ts).
 */
export interface VerifyReads {
  /** S1, one read transaction held until its `close`, the check set's own read included. */
  snapshot(horizon: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): Promise<StoreSnapshot>;
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

const ROW_COLUMNS = 'id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at';
const NEWER_ROWS = `SELECT ${ROW_COLUMNS} FROM outbox WHERE id > ? ORDER BY id`;
const inJson = (column: string) => `${column} IN (SELECT value FROM json_each(?))`;

/** The reads of app.db. */
export function sqliteVerifyReads(db: Db): VerifyReads {
  let newerRows: Database.Statement<[number], OutboxRow> | undefined;
  return {
    snapshot: async (horizon, checkSet) => sqliteSnapshot(db, horizon, checkSet),
    // Read after each chunk of the stream: prepared once.
    newerThan: async (id) => (newerRows ??= db.prepare<[number], OutboxRow>(NEWER_ROWS)).all(id).map(newerEvent),
    pendingOf: async (eventIds) =>
      new Set(db.prepare<[string], string>(`SELECT event_id FROM outbox WHERE status = 'PENDING' AND ${inJson('event_id')}`).pluck().all(JSON.stringify(eventIds))),
    publishedRowsOf: async (eventIds) =>
      db.prepare<[string], OutboxRow>(`SELECT ${ROW_COLUMNS} FROM outbox WHERE status = 'PUBLISHED' AND ${inJson('event_id')}`).all(JSON.stringify(eventIds)),
    heldOf: async (eventIds) => new Set(db.prepare<[string], string>(`SELECT event_id FROM outbox WHERE ${inJson('event_id')}`).pluck().all(JSON.stringify(eventIds))),
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

/**
 * A keyset reader: `first` reads the first page, `after` the page after the last row read (`keyOf`
 * gives its bind values). Each page is one statement, so the connection runs others in between.
 */
function keysetReader<T>(first: (limit: number) => T[], after: (key: unknown[], limit: number) => T[], keyOf: (row: T) => unknown[]): PageReader<T> {
  let last: unknown[] | undefined;
  let done = false;
  return {
    async next(limit) {
      if (done) return [];
      const rows = last === undefined ? first(limit) : after(last, limit);
      if (rows.length < limit) done = true;
      if (rows.length > 0) last = keyOf(rows[rows.length - 1]);
      return rows;
    },
  };
}

/**
 * S1 on app.db: a connection of its own to the same file, in one read transaction (WAL: the writers
 * go on, the snapshot stays), so that the pages read between Redis calls are one snapshot. A
 * database in memory has no second connection: its own is used, its pages then not one snapshot.
 */
function sqliteSnapshot(main: Db, horizonOrNone: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): StoreSnapshot {
  const own = !main.memory && main.name !== '';
  // The open connection's own class: importing better-sqlite3 here would load it for every --help.
  const db = own ? new (main.constructor as typeof Database)(main.name, { fileMustExist: true }) : main;
  if (own) db.pragma('busy_timeout = 5000');
  try {
    if (own) db.exec('BEGIN');
    const maxId = db.prepare<[], { m: number | null }>('SELECT MAX(id) AS m FROM outbox').get()!.m ?? 0;
    const horizon = horizonOrNone ?? maxId;
    const pruned = db.prepare<[], number>('SELECT COALESCE(SUM(events), 0) FROM outbox_pruned').pluck().get()!;
    const pending = db.prepare<[number], number>("SELECT COUNT(*) FROM outbox WHERE status = 'PENDING' AND id <= ?").pluck().get(horizon)!;
    const pendingExamples = db.prepare<[number], number>(`SELECT id FROM outbox WHERE status = 'PENDING' AND id <= ? ORDER BY id LIMIT ${EXAMPLES}`).pluck().all(horizon);
    const pendingNewer = db.prepare<[number], number>("SELECT COUNT(*) FROM outbox WHERE status = 'PENDING' AND id > ?").pluck().get(horizon)!;
    const newerInSnapshot = db.prepare<[number], OutboxRow>(NEWER_ROWS).all(horizon).map(newerEvent);
    const producerSnapshot = producerSnapshotOf(db, checkSet);
    const eventColumns = 'SELECT id, event_id, aggregate_id, seq, status, created_at FROM outbox';
    const firstEvents = db.prepare<[number, number], ObservedEvent>(`${eventColumns} WHERE +id <= ? ORDER BY aggregate_id, seq LIMIT ?`);
    const nextEvents = db.prepare<[string, number, number, number], ObservedEvent>(`${eventColumns} WHERE (aggregate_id, seq) > (?, ?) AND +id <= ? ORDER BY aggregate_id, seq LIMIT ?`);
    const aggregateColumns = 'SELECT aggregate_id AS key, last_seq AS lastSeq, last_at AS lastAt FROM outbox_aggregates';
    const firstAggregates = db.prepare<[number], AggregateRow>(`${aggregateColumns} ORDER BY aggregate_id LIMIT ?`);
    const nextAggregates = db.prepare<[string, number], AggregateRow>(`${aggregateColumns} WHERE aggregate_id > ? ORDER BY aggregate_id LIMIT ?`);
    const prunedColumns = 'SELECT aggregate_id AS key, through_seq AS throughSeq, events FROM outbox_pruned';
    const firstPruned = db.prepare<[number], PrunedAggregate>(`${prunedColumns} ORDER BY aggregate_id LIMIT ?`);
    const nextPruned = db.prepare<[string, number], PrunedAggregate>(`${prunedColumns} WHERE aggregate_id > ? ORDER BY aggregate_id LIMIT ?`);
    const known = db.prepare<[string, number], string>(
      `SELECT value FROM json_each(?) WHERE EXISTS (SELECT 1 FROM outbox_aggregates WHERE aggregate_id = value)
          OR EXISTS (SELECT 1 FROM outbox_pruned WHERE aggregate_id = value)
          OR EXISTS (SELECT 1 FROM outbox WHERE aggregate_id = value AND id <= ?)`,
    );
    const prunedReader = () =>
      keysetReader(
        (limit) => firstPruned.all(limit),
        ([key], limit) => nextPruned.all(key as string, limit),
        (p) => [p.key],
      );
    return {
      horizon,
      maxId,
      pruned,
      pending,
      pendingExamples,
      pendingNewer,
      newerInSnapshot,
      producerSnapshot,
      events: keysetReader(
        (limit) => firstEvents.all(horizon, limit),
        ([key, seq], limit) => nextEvents.all(key as string, seq as number, horizon, limit),
        (e) => [e.aggregate_id, e.seq],
      ),
      aggregates: keysetReader(
        (limit) => firstAggregates.all(limit),
        ([key], limit) => nextAggregates.all(key as string, limit),
        (a) => [a.key],
      ),
      prunedRows: prunedReader(),
      prunedAgain: prunedReader,
      known: async (keys) => new Set(known.pluck().all(JSON.stringify(keys), horizon)),
      close: async () => {
        if (!own) return;
        if (db.inTransaction) db.exec('COMMIT');
        db.close();
      },
    };
  } catch (error) {
    if (own) db.close();
    throw error;
  }
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
