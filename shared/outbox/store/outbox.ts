import type { Database } from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import type { EventDeclarations, EventSet, EventTypeOf, NewEvent } from '../events/define-events.js';
import { ensureOutboxTables } from './schema.js';

export interface OutboxOptions<D extends EventDeclarations> {
  /** The declared event types (`defineEvents`): append refuses any other, and any payload their schema refuses. */
  events: EventSet<D>;
}

/** What `append` wrote: the event's id, its seq within its aggregate, and the aggregate key. */
export interface AppendedEvent {
  eventId: string;
  seq: number;
  /** `<aggregateType>:<aggregateId>`, e.g. `order:42`. */
  aggregate: string;
}

export interface Outbox<D extends EventDeclarations> {
  /**
   * Appends one event to the outbox. Inside the caller's transaction (`db.transaction(...)`) it is
   * part of it: committed with the caller's own writes, or rolled back with them, seq included.
   * Outside one it commits on its own (IMMEDIATE). The seq is the aggregate's next (1, 2, 3, ...),
   * assigned under SQLite's write lock, so two connections never get the same one. Bad input throws
   * `InvalidEventError` (one line) before anything is written.
   */
  append<T extends EventTypeOf<D>>(event: NewEvent<D, T>): AppendedEvent;
}

/**
 * The producer side of the outbox on the user's better-sqlite3 connection: creates the library's
 * tables when missing (idempotent, the user's tables and `user_version` left alone).
 */
export function createOutbox<const D extends EventDeclarations>(db: Database, { events }: OutboxOptions<D>): Outbox<D> {
  ensureOutboxTables(db);
  // One statement takes the aggregate's next seq: a new aggregate starts at 1.
  const nextSeq = db
    .prepare<[string, number]>(
      `INSERT INTO outbox_aggregates (aggregate_id, last_seq, last_at) VALUES (?, 1, ?)
       ON CONFLICT (aggregate_id) DO UPDATE SET last_seq = last_seq + 1, prev_at = last_at, last_at = excluded.last_at
       RETURNING last_seq, prev_at`,
    );
  const insertEvent = db.prepare<[string, string, number, string, string, number, number]>(
    'INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
  );

  function write(type: string, aggregate: string, payloadJson: string): AppendedEvent {
    const now = Date.now();
    const { last_seq: seq, prev_at: prevAt } = nextSeq.get(aggregate, now) as { last_seq: number; prev_at: number };
    const eventId = randomUUID();
    insertEvent.run(eventId, aggregate, seq, type, payloadJson, now, seq === 1 ? 0 : prevAt);
    return { eventId, seq, aggregate };
  }
  const writeAlone = db.transaction(write);

  return {
    append(event) {
      const { type, aggregate, payloadJson } = events.check(event);
      return db.inTransaction ? write(type, aggregate, payloadJson) : writeAlone.immediate(type, aggregate, payloadJson);
    },
  };
}
