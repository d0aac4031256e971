import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { keys } from '../../outbox/redis/keys.js';
import { readGuards } from '../../outbox/redis/guards.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { guardDropped, mayBeSwept, readWindow } from '../../outbox/redis/dedupe-window.js';
import { assertNotBehind, describeEvidence, sqliteHistory, type BehindEvidence, type StoreHistory } from '../../outbox/relay/store-pairing.js';

export interface PruneOptions {
  /** Rows deleted per transaction: small, so a producer never waits long for the write lock. Default 1000. */
  batchSize?: number;
  /** Called after each batch. */
  onBatch?: (deleted: number) => void;
  /** Count what would be deleted, delete nothing (`prune --dry-run`). */
  dryRun?: boolean;
  /** The clock the window is measured from (default now): a run confirmed after a dry run uses the dry run's. */
  now?: number;
  /** Delete no row above this id: a run confirmed after a dry run deletes no more than it showed. */
  throughId?: number;
}

export interface PruneResult {
  deleted: number;
  batches: number;
  /**
   * Old PUBLISHED rows that stay because the consumer has not applied them, or an earlier row, yet:
   * from the first row not applied up to the first row that stays anyway (PENDING or recent).
   */
  keptNotApplied: number;
  /** The longest a batch held the write lock, ms. */
  maxBatchMs: number;
  ms: number;
  /** The clock the window was measured from. */
  now: number;
  /** The first and last row deleted (or, in a dry run, to be deleted); null when none. */
  firstId: number | null;
  lastId: number | null;
  /** The first rows deleted, up to SHOWN_ROWS, for a dry run and a question to show. */
  firstRows: Candidate[];
  /**
   * The run stopped before rows it had read as applied: one was set back to PENDING meanwhile
   * (`outbox replay`), or on PostgreSQL their aggregate still holds an earlier row; the next run
   * goes on once the relay and the consumer have caught up.
   */
  stoppedEarly: boolean;
}

/** Rows kept in `PruneResult.firstRows`. */
const SHOWN_ROWS = 5;

export interface Candidate {
  id: number;
  event_id: string;
  /** The aggregate key, e.g. `order:7`. */
  aggregate_id: string;
  seq: number;
  event_type: string;
  status: string;
  created_at: number;
}

/** Fields per HMGET: a batch's look-ups go in a few commands, pipelined in one round trip. */
const LOOKUP_CHUNK = 500;

/**
 * What prune needs of the producer's store, whichever it is: app.db (`sqlitePruneRows`) or
 * PostgreSQL (`pgPruneRows`, pg-prune.ts).
 */
export interface PruneRows {
  /** Up to `limit` rows with an id above `after`, in id order. */
  readBatch(after: number, limit: number): Promise<Candidate[]>;
  /**
   * In one transaction: deletes the PUBLISHED rows with an id in (after, through] and records them
   * in `outbox_pruned`; resolves the ids deleted, ascending. A row a concurrent replay set back to PENDING since
   * prune read it stays, and so does every row after it in the range: each aggregate loses only a
   * prefix of its events (a later row of the replayed one's aggregate pruned, `outbox_pruned` would
   * say the aggregate is pruned past an event the store still holds, and a Redis rebuilt from it
   * would skip that event). Then fewer rows go than were read, and prune stops.
   * `ids`: the rows of that range prune read and found applied. On app.db they are the whole range
   * (one writer: a row cannot commit below ids already read); on PostgreSQL only they go, since a
   * row can commit below them after the read, and be relayed and marked before the delete.
   */
  deleteRange(after: number, through: number, ids: number[]): Promise<number[]>;
  /** Old PUBLISHED rows from `fromId` up to the first row that stays anyway (PENDING or recent). */
  countWaiting(fromId: number, cutoff: number): Promise<number>;
  /** Its rows by id and what prune deleted: prune refuses a store behind its Redis (`assertNotBehind`). */
  history: StoreHistory;
}

/** The rows of app.db. */
export function sqlitePruneRows(db: Db): PruneRows {
  const readBatch = db.prepare<[number, number], Candidate>(
    'SELECT id, event_id, aggregate_id, seq, event_type, status, created_at FROM outbox WHERE id > ? ORDER BY id LIMIT ?',
  );
  const record = db.prepare<[number, number]>(
    `INSERT INTO outbox_pruned (aggregate_id, through_seq, events)
       SELECT aggregate_id, MAX(seq), COUNT(*) FROM outbox WHERE id > ? AND id <= ? AND status = 'PUBLISHED' GROUP BY aggregate_id
     ON CONFLICT (aggregate_id) DO UPDATE SET through_seq = MAX(through_seq, excluded.through_seq), events = events + excluded.events`,
  );
  const remove = db.prepare<[number, number], number>("DELETE FROM outbox WHERE id > ? AND id <= ? AND status = 'PUBLISHED' RETURNING id").pluck();
  const firstKept = db.prepare<[number, number], number | null>("SELECT MIN(id) FROM outbox WHERE id > ? AND id <= ? AND status != 'PUBLISHED'").pluck();
  const deleteRange = db.transaction((after: number, through: number): number[] => {
    const kept = firstKept.get(after, through);
    const end = kept == null ? through : kept - 1;
    record.run(after, end);
    return remove.all(after, end).sort((a, b) => a - b);
  });
  const countWaiting = db.prepare<{ fromId: number; cutoff: number; end: number }, { n: number }>(
    `SELECT COUNT(*) AS n FROM outbox WHERE id >= @fromId AND id < COALESCE(
       (SELECT id FROM outbox WHERE id >= @fromId AND (status = 'PENDING' OR created_at >= @cutoff) ORDER BY id LIMIT 1), @end)`,
  );
  return {
    readBatch: async (after, limit) => readBatch.all(after, limit),
    // IMMEDIATE: the write lock from the start, so the record and the delete see the same rows.
    deleteRange: async (after, through) => deleteRange.immediate(after, through),
    countWaiting: async (fromId, cutoff) => countWaiting.get({ fromId, cutoff, end: Number.MAX_SAFE_INTEGER })!.n,
    history: sqliteHistory(db),
  };
}

/**
 * Deletes PUBLISHED rows created before `olderThanMs` whose events the consumer has applied, oldest
 * first, in small transactions with a yield between them. A row is applied when its aggregate's
 * applied seq has reached its seq and its event_id is in `processed`, or its records were swept by
 * the dedupe window (`appliedPrefixLength`); until then Redis may still need it (lost from the
 * queue, `verify --repair` republishes it from this row). `redis`: one Redis, or the partitions, each
 * row looked up in its aggregate's.
 *
 * Only rows below the first row that must stay (PENDING, recent or not applied, in id order) go, so
 * each aggregate loses a prefix of its events; `outbox_pruned` records it, in the same transaction,
 * for verify. Candidates are read and looked up in Redis outside any transaction; only the delete
 * takes the write lock (on app.db; row locks on PostgreSQL). A dry run goes through the same steps
 * and counts instead of deleting. `store` is app.db or `pgPruneRows(pool)`.
 *
 * A store behind its Redis (restored from an older backup: `assertNotBehind`) is refused before
 * anything is read (`StoreBehindError`, exit 5), dry run included: `verify --repair` rebuilds Redis
 * from the store, and every row pruned before it would be an effect that rebuild cannot bring back.
 */
export async function prune(
  store: Db | PruneRows,
  redis: Redis | Partitions,
  olderThanMs: number,
  options: PruneOptions = {},
): Promise<PruneResult> {
  const rows = 'prepare' in store ? sqlitePruneRows(store) : store;
  const partitions = partitionsOf(redis);
  await assertNotBehind(partitions, rows.history);
  const batchSize = options.batchSize ?? 1000;
  const now = options.now ?? Date.now();
  const cutoff = now - olderThanMs;
  const throughId = options.throughId ?? Number.MAX_SAFE_INTEGER;

  const started = performance.now();
  const result: PruneResult = { deleted: 0, batches: 0, keptNotApplied: 0, maxBatchMs: 0, ms: 0, now, firstId: null, lastId: null, firstRows: [], stoppedEarly: false };
  for (let cursor = 0; ; ) {
    const batch = await rows.readBatch(cursor, batchSize);
    const old = takeWhile(batch, (row) => row.status === 'PUBLISHED' && row.created_at < cutoff);
    const appliedCount = await appliedPrefixLength(partitions, old, rows.history);
    const applied = takeWhile(old.slice(0, appliedCount), (row) => row.id <= throughId);
    if (applied.length > 0) {
      const through = applied[applied.length - 1].id;
      const batchStarted = performance.now();
      // In a dry run the rows counted are exactly those the DELETE would take: PUBLISHED, in (cursor, through].
      const deleted = options.dryRun ? applied.map((row) => row.id) : await rows.deleteRange(cursor, through, applied.map((row) => row.id));
      result.maxBatchMs = Math.max(result.maxBatchMs, performance.now() - batchStarted);
      const ids = new Set(deleted);
      const gone = applied.filter((row) => ids.has(row.id));
      result.deleted += gone.length;
      if (gone.length > 0) {
        result.batches += 1;
        result.firstId ??= gone[0].id;
        result.lastId = gone[gone.length - 1].id;
        result.firstRows.push(...gone.slice(0, SHOWN_ROWS - result.firstRows.length));
      }
      cursor = through;
      options.onBatch?.(result.deleted);
      // A replay set one of them back to PENDING meanwhile (or another prune took some): the next run goes on.
      if (gone.length < applied.length) {
        result.stoppedEarly = true;
        break;
      }
    }
    if (appliedCount < old.length) result.keptNotApplied = await rows.countWaiting(old[appliedCount].id, cutoff);
    if (applied.length < batch.length || batch.length === 0) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
  result.ms = performance.now() - started;
  return result;
}

function takeWhile<T>(items: T[], keep: (item: T) => boolean): T[] {
  const end = items.findIndex((item) => !keep(item));
  return end === -1 ? items : items.slice(0, end);
}

/** HMGET of `fields` in `hash`, in chunks of LOOKUP_CHUNK, sent at once (the connection auto-pipelines). */
async function lookUp(redis: Redis, hash: string, fields: string[]): Promise<(string | null)[]> {
  const chunks: Promise<(string | null)[]>[] = [];
  for (let i = 0; i < fields.length; i += LOOKUP_CHUNK) {
    const slice = fields.slice(i, i + LOOKUP_CHUNK);
    chunks.push(hash === keys.appliedSeq ? readGuards(redis, slice) : redis.hmget(hash, ...slice));
  }
  return (await Promise.all(chunks)).flat();
}

/** `lookUp` of one field per row, each in the partition of the row's aggregate; answers in `rows`' order. */
async function lookUpByPartition(
  partitions: Partitions,
  rows: Candidate[],
  hash: string,
  field: (row: Candidate) => string,
): Promise<(string | null)[]> {
  const answers: (string | null)[] = new Array(rows.length).fill(null);
  const groups = byPartition(partitions, rows.map((row, i) => ({ row, i })), (item) => item.row.aggregate_id);
  await Promise.all(
    [...groups].map(async ([index, items]) => {
      const values = await lookUp(partitions.clients[index], hash, items.map((item) => field(item.row)));
      items.forEach((item, k) => (answers[item.i] = values[k]));
    }),
  );
  return answers;
}

/**
 * How many of `rows`, from the first, the consumer has applied: its aggregate's applied seq >= its
 * seq, and its processed entry there, or its records swept by the dedupe window (no processed entry,
 * no apply count, committed at or before its partition's `sweptThrough`: beyond the window the seq
 * guard is the evidence); or its aggregate has no guard and it was committed at or before
 * `droppedThrough` (the guard dropped past the aggregate horizon: the consumer skips it as a
 * duplicate). Each row is looked up in its aggregate's partition.
 *
 * Throws `StoreBehindError` when what it reads shows the store behind Redis beyond the rows the meta
 * hash records (`assertNotBehind`): an aggregate of `rows` applied past the store's last seq for it,
 * or a row never applied (no processed entry, no apply count, not swept) whose seq its aggregate's
 * applied seq has passed (Redis applied another event there). Pruning then would delete rows the
 * repair needs.
 */
async function appliedPrefixLength(partitions: Partitions, rows: Candidate[], history: StoreHistory): Promise<number> {
  if (rows.length === 0) return 0;
  const [processed, seqs] = await Promise.all([
    lookUpByPartition(partitions, rows, keys.processed, (row) => row.event_id),
    lookUpByPartition(partitions, rows, keys.appliedSeq, (row) => row.aggregate_id),
  ]);
  const applied = seqs.map(Number);
  const lastSeqs = await history.lastSeqs([...new Set(rows.map((row) => row.aggregate_id))]);
  const refuse = async (index: number, evidence: BehindEvidence) =>
    history.behind(partitions.clients[index], (database) => describeEvidence(evidence, database));
  const past = rows.findIndex((row, i) => applied[i] > (lastSeqs.get(row.aggregate_id) ?? 0));
  if (past !== -1) {
    const { aggregate_id: aggregate } = rows[past];
    const last = lastSeqs.get(aggregate) ?? 0;
    throw await refuse(partitions.indexOf(aggregate), { kind: 'aggregate', aggregate, applied: applied[past], last });
  }

  // Passed by its aggregate's seq guard with no processed entry: swept by the window, or taken by another event.
  const unrecorded = rows.flatMap((row, i) => (processed[i] === null && applied[i] >= row.seq ? [i] : []));
  // No guard at all: its aggregate's may have been dropped past the horizon.
  const guardless = rows.flatMap((_row, i) => (seqs[i] === null ? [i] : []));
  const swept = new Set<number>();
  const dropped = new Set<number>();
  if (unrecorded.length > 0 || guardless.length > 0) {
    const eventOf = (row: Candidate) => row.event_id;
    const counts = await lookUpByPartition(partitions, unrecorded.map((i) => rows[i]), keys.applyCount, eventOf);
    // Read after the look-ups, on the same connections (so after them in Redis): a sweep that dropped
    // a record or a guard they missed has moved sweptThrough or droppedThrough by then.
    const indexOf = (i: number) => partitions.indexOf(rows[i].aggregate_id);
    const indexes = [...new Set([...unrecorded, ...guardless].map(indexOf))];
    const windows = new Map(
      await Promise.all(indexes.map(async (index) => [index, await readWindow(partitions.clients[index])] as const)),
    );
    for (const [k, i] of unrecorded.entries()) {
      if (counts[k] !== null) continue;
      const row = rows[i];
      if (!mayBeSwept(row.created_at, windows.get(indexOf(i))!)) {
        const evidence = { kind: 'taken', aggregate: row.aggregate_id, seq: row.seq, event: row.event_id } as const;
        throw await refuse(indexOf(i), evidence);
      }
      swept.add(i);
    }
    // Committed at or before the horizon's drops reached: the consumer takes it for a duplicate and
    // never applies it again, so no repair needs the row.
    for (const i of guardless) if (guardDropped(rows[i].created_at, windows.get(indexOf(i))!)) dropped.add(i);
  }
  const isApplied = (row: Candidate, i: number) =>
    dropped.has(i) || ((processed[i] !== null || swept.has(i)) && applied[i] >= row.seq);
  const firstNotApplied = rows.findIndex((row, i) => !isApplied(row, i));
  return firstNotApplied === -1 ? rows.length : firstNotApplied;
}
