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

/**
 * What the executor runs for an event: its handler with the event as the handler gets it, or why
 * no attempt can handle it (poison: dead-lettered at once with that reason).
 */
export type Delivery = { delivered: unknown; handler: (event: never, db: Db) => unknown } | { poison: string };

/**
 * The delivery of a set whose events are not checked further: the handler of the event's type, the
 * event as parsed. (The public handler sets check the payload against its declaration instead.)
 */
export function deliverByType(set: DatabaseHandlerSet): (event: OutboxEvent) => Delivery {
  return (event) => {
    const handler = Object.hasOwn(set.handlers, event.type) ? set.handlers[event.type] : undefined;
    if (typeof handler !== 'function') return { poison: `no handler for event type "${event.type}"` };
    return { delivered: event, handler };
  };
}
