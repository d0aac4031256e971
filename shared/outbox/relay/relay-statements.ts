import type { Statement } from 'better-sqlite3';
import type { Db } from '../store/open-database.js';
import { MESSAGE_SQL } from '../store/events.js';
import type { RowToPush } from './push-rows.js';

/**
 * The relay's two statements on app.db: `outbox bench` times them alone (no Redis) as the relay's
 * SQLite bound.
 */
export function relayStatements(db: Db): { selectPending: Statement<[PendingQuery], RowToPush>; markRows: Statement<[number, string]> } {
  return {
    // The partial index holds (status, rowid): WHERE status='PENDING' ORDER BY id reads it in order,
    // no sort. Each row's message is built by SQLite (MESSAGE_SQL): no column becomes a JavaScript string but the aggregate key.
    selectPending: db.prepare<[PendingQuery], RowToPush>(
      `SELECT id, aggregate_id, ${MESSAGE_SQL} AS message FROM outbox WHERE status = 'PENDING' AND id > @after ORDER BY id LIMIT @limit`,
    ),
    // Exactly the rows of the batch, in one statement. (A range UPDATE could also mark a row that a
    // concurrent replay set back to PENDING after the SELECT, without pushing it again.)
    markRows: db.prepare<[number, string]>(
      "UPDATE outbox SET status = 'PUBLISHED', published_at = ? WHERE id IN (SELECT value FROM json_each(?)) AND status = 'PENDING'",
    ),
  };
}

/** The pending rows after id `after`, at most `limit`, as messages of store `store`. */
export interface PendingQuery {
  store: string;
  after: number;
  limit: number;
}
