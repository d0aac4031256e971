import type { Statement } from 'better-sqlite3';
import type { Db } from '../../store/open-database.js';
import type { OutboxEvent } from '../../store/events.js';

/**
 * What became of one event of a batch: 'applied' (its handler ran and committed with its inbox
 * row), 'in-inbox' (an earlier attempt committed it: the handler was skipped), or the handler's
 * error (its writes rolled back).
 */
export type DatabaseApplyResult = 'applied' | 'in-inbox' | { error: unknown };

export interface DatabaseTask {
  event: OutboxEvent;
  /** Runs the event's handler on `db`. */
  run: (db: Db) => unknown;
}

const inserts = new WeakMap<Db, Statement>();

function insertOf(db: Db): Statement {
  let insert = inserts.get(db);
  if (!insert) {
    insert = db.prepare('INSERT INTO outbox_inbox (event_id, aggregate_id, seq, applied_at) VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING');
    inserts.set(db, insert);
  }
  return insert;
}

/** The handler's writes and the inbox row of one event, under a savepoint of the batch's transaction. */
function applyOne(db: Db, insert: Statement, { event, run }: DatabaseTask, appliedAt: number): DatabaseApplyResult {
  db.exec('SAVEPOINT outbox_event');
  try {
    if (insert.run(event.eventId, String(event.aggregateId), event.seq, appliedAt).changes === 0) {
      db.exec('RELEASE outbox_event');
      return 'in-inbox';
    }
    const returned = run(db);
    if (returned instanceof Promise) {
      returned.catch(() => {});
      // Whatever it does after an await would land outside the transaction, or in the next one.
      throw new Error('a database handler must be synchronous (it runs inside the transaction): it returned a promise');
    }
    db.exec('RELEASE outbox_event');
    return 'applied';
  } catch (error) {
    // SQLite may have rolled the whole transaction back itself (a full disk, say): then there is no savepoint left.
    if (db.inTransaction) db.exec('ROLLBACK TO outbox_event; RELEASE outbox_event');
    return { error };
  }
}

/**
 * Runs each task's handler together with its event's inbox insert, all in one BEGIN IMMEDIATE
 * transaction, each event under a savepoint: a throwing handler rolls back its own writes and
 * inbox row only. An inbox row already there means an earlier attempt committed (its process died
 * before Redis heard of it): that handler is skipped. One commit for the batch, because a commit
 * costs far more than a handler's writes (~160 µs against ~5 µs here), and every per-event
 * guarantee holds: an event's effect and inbox row commit together or not at all.
 *
 * If SQLite rolls the whole transaction back (or the commit fails), every event of the batch fails
 * this attempt with that error: none of them committed.
 */
export function applyBatchInDatabase(db: Db, tasks: DatabaseTask[]): DatabaseApplyResult[] {
  const insert = insertOf(db);
  const appliedAt = Date.now();
  db.exec('BEGIN IMMEDIATE');
  const results: DatabaseApplyResult[] = [];
  try {
    for (const task of tasks) {
      const result = applyOne(db, insert, task, appliedAt);
      if (!db.inTransaction) {
        const error = typeof result === 'object' ? result.error : new Error('the transaction was rolled back');
        return tasks.map(() => ({ error }));
      }
      results.push(result);
    }
    db.exec('COMMIT');
    return results;
  } catch (error) {
    if (db.inTransaction) db.exec('ROLLBACK');
    return tasks.map(() => ({ error }));
  }
}
