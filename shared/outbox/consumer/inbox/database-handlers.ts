import type { Db } from '../../store/open-database.js';
import type { OutboxEvent } from '../../store/events.js';

/**
 * A handler of database mode: writes the event's effect with `db`, inside the transaction the
 * consumer opened (BEGIN IMMEDIATE) together with the event's inbox row. Synchronous (better-sqlite3
 * is): the transaction commits when it returns and rolls back when it throws.
 */
export type DatabaseHandler<E = OutboxEvent> = (event: E, db: Db) => void;

/**
 * A handler set of database mode: one handler per event type. The shape of the public
 * `defineDatabaseHandlers` (brief decision 5); `events` is the set's event declarations.
 */
export interface DatabaseHandlerSet<E = OutboxEvent> {
  mode: 'database';
  events?: unknown;
  handlers: Partial<Record<string, DatabaseHandler<E>>>;
}
