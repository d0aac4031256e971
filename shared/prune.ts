import type { Db } from './db/open-database.js';

export interface PruneOptions {
  /** Rows deleted per transaction: small, so a producer never waits long for the write lock. Default 1000. */
  batchSize?: number;
  /** Called after each batch. */
  onBatch?: (deleted: number) => void;
}

export interface PruneResult {
  deleted: number;
  batches: number;
  /** The longest a batch held the write lock, ms. */
  maxBatchMs: number;
  ms: number;
}

/**
 * Deletes PUBLISHED rows created before `olderThanMs`, oldest first, in small IMMEDIATE
 * transactions with a yield between them. Only rows below the oldest row that must stay (PENDING
 * or recent) go, so each aggregate loses a prefix of its events; `outbox_pruned` records it, in the
 * same transaction, for verify.
 */
export async function prune(db: Db, olderThanMs: number, options: PruneOptions = {}): Promise<PruneResult> {
  const batchSize = options.batchSize ?? 1000;
  const cutoff = Date.now() - olderThanMs;
  // The oldest row that must stay: the first PENDING one (partial index) or the first recent one
  // (a scan in id order that stops there).
  const firstPending = db.prepare<[], { id: number }>("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1").get()?.id;
  const firstRecent = db.prepare<[number], { id: number }>('SELECT id FROM outbox WHERE created_at >= ? ORDER BY id LIMIT 1').get(cutoff)?.id;
  const boundary = Math.min(firstPending ?? Number.MAX_SAFE_INTEGER, firstRecent ?? Number.MAX_SAFE_INTEGER);
  const nextBatch = db.prepare<[number, number, number], { last: number | null }>(
    'SELECT MAX(id) AS last FROM (SELECT id FROM outbox WHERE id > ? AND id < ? ORDER BY id LIMIT ?)',
  );
  const record = db.prepare<[number, number]>(
    `INSERT INTO outbox_pruned (aggregate_id, through_seq, events)
       SELECT aggregate_id, MAX(seq), COUNT(*) FROM outbox WHERE id > ? AND id <= ? AND status = 'PUBLISHED' GROUP BY aggregate_id
     ON CONFLICT (aggregate_id) DO UPDATE SET through_seq = MAX(through_seq, excluded.through_seq), events = events + excluded.events`,
  );
  // A row a concurrent replay set back to PENDING stays.
  const remove = db.prepare<[number, number]>("DELETE FROM outbox WHERE id > ? AND id <= ? AND status = 'PUBLISHED'");
  /** Prunes the next batch after `cursor`; resolves its last id and how many rows went, or null when done. */
  const pruneBatch = db.transaction((cursor: number): { last: number; deleted: number } | null => {
    const last = nextBatch.get(cursor, boundary, batchSize)!.last;
    if (last === null) return null;
    record.run(cursor, last);
    return { last, deleted: remove.run(cursor, last).changes };
  });

  const started = performance.now();
  const result: PruneResult = { deleted: 0, batches: 0, maxBatchMs: 0, ms: 0 };
  for (let cursor = 0; ; ) {
    const batchStarted = performance.now();
    const batch = pruneBatch.immediate(cursor);
    if (!batch) break;
    result.maxBatchMs = Math.max(result.maxBatchMs, performance.now() - batchStarted);
    result.deleted += batch.deleted;
    result.batches += 1;
    cursor = batch.last;
    options.onBatch?.(result.deleted);
    await new Promise((resolve) => setImmediate(resolve));
  }
  result.ms = performance.now() - started;
  return result;
}
