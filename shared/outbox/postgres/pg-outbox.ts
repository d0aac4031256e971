import type { Pool } from 'pg';
import { randomUUID } from 'node:crypto';
import type { EventDeclarations, EventTypeOf, NewEvent } from '../events/define-events.js';
import type { AppendedEvent, OutboxOptions } from '../store/outbox.js';
import { ensurePgOutboxTables, type Queryable } from './pg-schema.js';

export interface PgOutbox<D extends EventDeclarations> {
  /**
   * Appends one event on `db`: a PoolClient inside the caller's transaction (BEGIN ... COMMIT), where
   * it commits or rolls back with the caller's own writes, seq included; or a Pool / a client outside
   * a transaction, where its one statement commits on its own. The seq is the aggregate's next (1, 2,
   * 3, ...), taken under the row lock on the aggregate's `outbox_aggregates` row, which is held until
   * the transaction ends: concurrent producers of one aggregate queue behind it, so seqs stay gap-free
   * and in commit order. Bad input throws `InvalidEventError` (one line) before anything is sent.
   */
  append<T extends EventTypeOf<D>>(db: Queryable, event: NewEvent<D, T>): Promise<AppendedEvent>;
}

// One statement: bump (or create) the aggregate's counter row, locking it, and insert the event with
// the seq it returned. Atomic on its own, so even outside a transaction no seq is taken without its
// row. ON CONFLICT DO UPDATE works on the latest committed row version and waits for a producer that
// holds the row: two producers never read the same last_seq (READ COMMITTED; under REPEATABLE READ
// or SERIALIZABLE a concurrent producer gets a serialization failure to retry instead).
const APPEND = `
WITH next AS (
  INSERT INTO outbox_aggregates AS a (aggregate_id, last_seq, last_at) VALUES ($1, 1, $5)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1, prev_at = a.last_at, last_at = excluded.last_at
  RETURNING last_seq, prev_at
)
INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at)
SELECT $2, $1, last_seq, $3, $4, $5, CASE WHEN last_seq = 1 THEN 0 ELSE prev_at END FROM next
RETURNING seq`;

/**
 * The producer side of the outbox on PostgreSQL: creates the library's tables when missing (through
 * `pool`, once, idempotent), then appends in the caller's own transactions. The events are checked
 * by the same declarations as SQLite's `createOutbox`.
 */
export async function createPgOutbox<const D extends EventDeclarations>(pool: Pool, { events }: OutboxOptions<D>): Promise<PgOutbox<D>> {
  await ensurePgOutboxTables(pool);
  return {
    async append(db, event) {
      const { type, aggregate, payloadJson } = events.check(event);
      const eventId = randomUUID();
      const { rows } = await db.query<{ seq: string }>({ name: 'outbox-append', text: APPEND, values: [aggregate, eventId, type, payloadJson, Date.now()] });
      return { eventId, seq: Number(rows[0].seq), aggregate };
    },
  };
}
