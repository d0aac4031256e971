import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { keys } from '../../outbox/redis/keys.js';
import { partitionsOf } from '../../outbox/redis/partitions.js';
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
 * first, in small transactions with a yield between them. A row is applied when its event_id is in
 * `processed` and its aggregate's applied seq has reached its seq; until then Redis may still need
 * it (lost from the queue, `verify --repair` republishes it from this row).
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
export async function prune(store: Db | PruneRows, redis: Redis, olderThanMs: number, options: PruneOptions = {}): Promise<PruneResult> {
  const rows = 'prepare' in store ? sqlitePruneRows(store) : store;
  await assertNotBehind(partitionsOf(redis), rows.history);
  const batchSize = options.batchSize ?? 1000;
  const now = options.now ?? Date.now();
  const cutoff = now - olderThanMs;
  const throughId = options.throughId ?? Number.MAX_SAFE_INTEGER;

  const started = performance.now();
  const result: PruneResult = { deleted: 0, batches: 0, keptNotApplied: 0, maxBatchMs: 0, ms: 0, now, firstId: null, lastId: null, firstRows: [], stoppedEarly: false };
  for (let cursor = 0; ; ) {
    const batch = await rows.readBatch(cursor, batchSize);
    const old = takeWhile(batch, (row) => row.status === 'PUBLISHED' && row.created_at < cutoff);
    const appliedCount = await appliedPrefixLength(redis, old, rows.history);
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

/** See `appliedPrefixLength`: `applied[i]` is the applied seq of `rows[i]`'s aggregate, `processed[i]` its processed entry. */
async function assertNotOvertaken(redis: Redis, rows: Candidate[], processed: (string | null)[], applied: number[], history: StoreHistory): Promise<void> {
  const lastSeqs = await history.lastSeqs([...new Set(rows.map((row) => row.aggregate_id))]);
  const refuse = async (evidence: BehindEvidence) => history.behind(redis, (database) => describeEvidence(evidence, database));
  const past = rows.findIndex((row, i) => applied[i] > (lastSeqs.get(row.aggregate_id) ?? 0));
  if (past !== -1) {
    const { aggregate_id: aggregate } = rows[past];
    throw await refuse({ kind: 'aggregate', aggregate, applied: applied[past], last: lastSeqs.get(aggregate) ?? 0 });
  }
  const unapplied = rows.flatMap((row, i) => (processed[i] === null && applied[i] >= row.seq ? [row] : []));
  if (unapplied.length === 0) return;
  const counts = await redis.hmget(keys.applyCount, ...unapplied.map((row) => row.event_id));
  const taken = unapplied.find((_row, i) => counts[i] === null);
  if (taken) throw await refuse({ kind: 'taken', aggregate: taken.aggregate_id, seq: taken.seq, event: taken.event_id });
}

function takeWhile<T>(items: T[], keep: (item: T) => boolean): T[] {
  const end = items.findIndex((item) => !keep(item));
  return end === -1 ? items : items.slice(0, end);
}

/**
 * How many of `rows`, from the first, the consumer has applied: processed, and applied seq >= seq.
 * Throws `StoreBehindError` when what it reads shows the store behind Redis beyond the rows the meta
 * hash records (`assertNotBehind`): an aggregate of `rows` applied past the store's last seq for it,
 * or a row never applied (no processed entry, no apply count) whose seq its aggregate's applied seq
 * has passed (Redis applied another event there). Pruning then would delete rows the repair needs.
 */
async function appliedPrefixLength(redis: Redis, rows: Candidate[], history: StoreHistory): Promise<number> {
  const processed: Promise<(string | null)[]>[] = [];
  const appliedSeq: Promise<(string | null)[]>[] = [];
  for (let i = 0; i < rows.length; i += LOOKUP_CHUNK) {
    const chunk = rows.slice(i, i + LOOKUP_CHUNK);
    processed.push(redis.hmget(keys.processed, ...chunk.map((row) => row.event_id)));
    appliedSeq.push(redis.hmget(keys.appliedSeq, ...chunk.map((row) => row.aggregate_id)));
  }
  // All sent before any answer is awaited (the connection auto-pipelines): one round trip.
  const [processedChunks, seqChunks] = await Promise.all([Promise.all(processed), Promise.all(appliedSeq)]);
  const isProcessed = processedChunks.flat();
  const seqOf = seqChunks.flat();
  if (rows.length > 0) await assertNotOvertaken(redis, rows, isProcessed, seqOf.map(Number), history);
  const firstNotApplied = rows.findIndex((row, i) => isProcessed[i] === null || !(Number(seqOf[i]) >= row.seq));
  return firstNotApplied === -1 ? rows.length : firstNotApplied;
}
