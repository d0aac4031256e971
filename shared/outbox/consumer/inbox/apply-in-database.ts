import type { Statement } from 'better-sqlite3';
import type { Db } from '../../store/open-database.js';
import type { OutboxEvent } from '../../store/events.js';

/** 'applied': the handler ran and committed with the inbox row; 'in-inbox': applied before, the handler was skipped. */
export type DatabaseApplyResult = 'applied' | 'in-inbox';

const inserts = new WeakMap<Db, Statement>();

function insertOf(db: Db): Statement {
  let insert = inserts.get(db);
  if (!insert) {
    insert = db.prepare('INSERT INTO outbox_inbox (event_id, aggregate_id, seq, applied_at) VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING');
    inserts.set(db, insert);
  }
  return insert;
}

/**
 * Runs `handler` (the event's handler, given its delivered event and `db`) and the event's inbox
 * insert in one BEGIN IMMEDIATE transaction. An inbox row already there means an earlier attempt
 * committed (its process died before Redis heard of it): the handler is skipped. A throwing
 * handler rolls both back, and the error is rethrown.
 */
export function applyInDatabase(db: Db, event: OutboxEvent, handler: (db: Db) => unknown): DatabaseApplyResult {
  const insert = insertOf(db);
  const run = db.transaction((): DatabaseApplyResult => {
    if (insert.run(event.eventId, String(event.aggregateId), event.seq, Date.now()).changes === 0) return 'in-inbox';
    const returned = handler(db);
    if (returned instanceof Promise) {
      returned.catch(() => {});
      // Whatever it does after an await would land outside the transaction, or in the next one.
      throw new Error('a database handler must be synchronous (it runs inside the transaction): it returned a promise');
    }
    return 'applied';
  });
  return run.immediate();
}
