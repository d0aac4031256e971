import type { Redis } from 'ioredis';
import { explainError } from '../errors/explain-error.js';
import { OutboxError } from '../errors/outbox-error.js';
import { byPartition, partitionLayout, type Partitions } from '../redis/partitions.js';
import { pushEvents, type PushedRow } from '../redis/scripts.js';
import { layoutMismatch } from '../redis/partition-layout.js';

/** A row as the relay pushes it: its id (what it marks), its aggregate (its partition) and its message (`toMessage`'s text). */
export interface RowToPush {
  id: number;
  aggregate_id: string;
  message: string;
}

/**
 * Characters of messages per push call. ioredis writes a command as one string: past V8's
 * large-object size (128 KiB) that string costs the relay about twice as much CPU per message to
 * build and write (measured: 2.0 against 0.85 µs per 250-byte message), so a batch goes in slices.
 */
const SLICE_CHARS = 60_000;

/** `rows` in order, cut into slices of about SLICE_CHARS characters of messages (each at least one row). */
function slices(rows: RowToPush[]): RowToPush[][] {
  const result: RowToPush[][] = [];
  let start = 0;
  let chars = 0;
  for (let i = 0; i < rows.length; i += 1) {
    chars += rows[i].message.length;
    if (chars >= SLICE_CHARS || i === rows.length - 1) {
      result.push(rows.slice(start, i + 1));
      start = i + 1;
      chars = 0;
    }
  }
  return result;
}

/** A slice's last row (its highest id) with its event id and seq, read from its message: what the push records. */
function lastRowOf(slice: RowToPush[]): PushedRow | undefined {
  const { id, aggregate_id: aggregate, message } = slice[slice.length - 1];
  const { event_id: eventId, seq } = JSON.parse(message) as { event_id?: unknown; seq?: unknown };
  return typeof eventId === 'string' && typeof seq === 'number' ? { id, eventId, aggregate, seq } : undefined;
}

export type PushOutcome =
  /**
   * Every slice was taken; `pushedAt`: Redis's clock when the first of them reached its queue (the
   * rows' published_at). The earliest, not the last: no event of the batch can be applied before it,
   * so the consumer's part of the latency (applied - published) never comes out negative.
   */
  | { status: 'ok'; pushedAt: number }
  /** A partition serves no store (it lost its state): the relay pairs again. Other partitions may have taken theirs: duplicates. */
  | { status: 'unclaimed' }
  /** A partition serves another store. */
  | { status: 'foreign'; redis: Redis; servedStore: string };

/**
 * Pushes a batch of rows, each to its aggregate's partition (in id order within each), the
 * partitions at once, each in slices (one push script call each). A row is marked PUBLISHED only
 * once every push of its batch was acknowledged; a push that fails leaves the whole batch to be
 * pushed again: duplicates, never loss (a later slice may have landed before an earlier one failed:
 * the consumer's seq guard parks what comes ahead of its predecessor). A partition
 * claimed for another number of partitions is a setting to fix (exit 2); a failed push, exit 5.
 */
export async function pushRows(partitions: Partitions, storeId: string, rows: RowToPush[]): Promise<PushOutcome> {
  const calls: { index: number; messages: string[]; last: PushedRow | undefined }[] = [];
  for (const [index, group] of byPartition(partitions, rows, (row) => row.aggregate_id)) {
    for (const slice of slices(group)) calls.push({ index, messages: slice.map((row) => row.message), last: lastRowOf(slice) });
  }
  let results;
  try {
    // All sent at once; one partition's slices go in order on its connection, so Redis runs them in order.
    results = await Promise.all(
      calls.map(async ({ index, messages, last }) => {
        const redis = partitions.clients[index];
        const layout = partitionLayout(index, partitions.count);
        return { redis, layout, result: await pushEvents(redis, storeId, messages, layout, last) };
      }),
    );
  } catch (error) {
    const reason = explainError(error)?.message ?? (error instanceof Error ? error.message : String(error));
    throw new OutboxError(`cannot relay outbox rows ${rows[0].id}-${rows[rows.length - 1].id}: ${reason}`, 5);
  }
  let pushedAt = Infinity;
  for (const { redis, layout, result } of results) {
    if (result.status === 'layout') throw layoutMismatch(redis, layout, result.servedLayout);
    if (result.status === 'foreign') return { status: 'foreign', redis, servedStore: result.servedStore };
    if (result.status === 'unclaimed') return { status: 'unclaimed' };
    pushedAt = Math.min(pushedAt, result.pushedAt);
  }
  return { status: 'ok', pushedAt };
}
