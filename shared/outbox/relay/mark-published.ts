import type { Statement } from 'better-sqlite3';
import type { Db } from '../store/open-database.js';
import { replayGenerationReader } from '../store/store-meta.js';
import { relayStatements } from './relay-statements.js';

/** A batch to mark PUBLISHED: its ids as JSON arrays, in two halves (the mid-batch crash point falls between them). */
export interface MarkRequest {
  firstHalf: string;
  secondHalf: string;
  /** Redis's clock when the push reached the queue: the rows' published_at. */
  pushedAt: number;
  /** The replay generation the pass read its rows under. */
  generation: number;
}

/** The ids of `rows` as a MarkRequest's two halves. */
export function markHalves(rows: readonly { id: number }[]): Pick<MarkRequest, 'firstHalf' | 'secondHalf'> {
  const half = rows.length >> 1;
  return { firstHalf: JSON.stringify(rows.slice(0, half).map((row) => row.id)), secondHalf: JSON.stringify(rows.slice(half).map((row) => row.id)) };
}

/**
 * The relay's mark, one IMMEDIATE transaction on `db`: marks the rows, unless a replay, repair or
 * rebuild set rows back to PENDING since the pass read `generation` (those rows may be among these,
 * and they must be pushed again, not marked: a relay paused between push and mark would otherwise
 * undo the replay); then it resolves false. `midBatch` runs between the halves, inside the
 * transaction (the crash point). Used in the relay's thread (with the mark statement it prepared)
 * and in its mark thread (mark-worker.ts).
 */
export function createMarkPublished(db: Db, markRows: Statement<[number, string]> = relayStatements(db).markRows): (request: MarkRequest, midBatch: () => void) => boolean {
  const replayGeneration = replayGenerationReader(db);
  const mark = db.transaction(({ firstHalf, secondHalf, pushedAt, generation }: MarkRequest, midBatch: () => void): boolean => {
    if (replayGeneration() !== generation) return false;
    markRows.run(pushedAt, firstHalf);
    midBatch();
    markRows.run(pushedAt, secondHalf);
    return true;
  });
  return (request, midBatch) => mark.immediate(request, midBatch);
}
