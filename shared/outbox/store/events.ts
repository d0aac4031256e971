/** An outbox row as the relay reads it. `payload` is the JSON text stored in SQLite. */
export interface OutboxRow {
  id: number;
  event_id: string;
  /** The aggregate key, `<aggregateType>:<aggregateId>` (e.g. `order:42`). */
  aggregate_id: string;
  seq: number;
  event_type: string;
  payload: string;
  /** When the row was appended (ms since epoch, the appending process's clock): the event's commit time. */
  created_at: number;
  /** The created_at of the aggregate's previous event; 0 for its first, or a row from before it was kept. */
  prev_created_at: number;
}

/**
 * A message on `outbox.events`, its envelope parsed and checked; the payload is checked later, by
 * the declaration of its type (`EventSet.deliver`).
 */
export interface OutboxEvent {
  eventId: string;
  /** The store (app.db) the event comes from; the consumer applies it only where Redis serves that store. */
  storeId: string;
  /** The opaque aggregate key `<aggregateType>:<aggregateId>` (e.g. `order:42`): per-aggregate order and seq are per key. */
  aggregateId: string;
  seq: number;
  type: string;
  payload: Record<string, unknown>;
  /** The row's created_at (ms since epoch): for the commit → applied latency. Absent from messages of an older relay. */
  createdAt?: number;
  /** The created_at of the aggregate's previous event (0: none kept). Absent from messages of an older relay. */
  prevCreatedAt?: number;
}

/**
 * The wire form of a row of store `storeId`: the seed's fields, then `store_id`, `created_at` (the
 * commit time, for the commit → applied latency) and `prev_created_at` (see the aggregate horizon). The stored payload text is embedded as it
 * is (it was written by JSON.stringify), so the relay never parses it. The same row always makes
 * the same text: `verify` finds a queued message by it.
 */
export function toMessage(row: OutboxRow, storeId: string): string {
  return (
    `{"event_id":${JSON.stringify(row.event_id)},"aggregate_id":${JSON.stringify(row.aggregate_id)},` +
    `"seq":${row.seq},"event_type":${JSON.stringify(row.event_type)},"payload":${row.payload},"store_id":${JSON.stringify(storeId)},"created_at":${row.created_at},` +
    `"prev_created_at":${row.prev_created_at}}`
  );
}

/**
 * `toMessage` as a SQLite expression over the outbox table's columns, the store id given as the
 * named parameter @store: the same text (json_quote escapes as JSON.stringify does), built in
 * SQLite's C instead of JavaScript, so that the relay on app.db reads each row's message ready made
 * (test/relay-message.test.ts holds the two to the same text).
 */
export const MESSAGE_SQL =
  `'{"event_id":' || json_quote(event_id) || ',"aggregate_id":' || json_quote(aggregate_id) || ',"seq":' || seq || ',"event_type":' || json_quote(event_type) ||` +
  ` ',"payload":' || payload || ',"store_id":' || json_quote(@store) || ',"created_at":' || created_at ||` +
  ` ',"prev_created_at":' || prev_created_at || '}'`;

/** The event_id of a queue entry, read without checking the rest; undefined when there is none. */
export function eventIdOf(message: string): string | undefined {
  try {
    const id = (JSON.parse(message) as { event_id?: unknown }).event_id;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}
