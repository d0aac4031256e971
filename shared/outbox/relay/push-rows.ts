import type { Redis } from 'ioredis';
import { explainError } from '../errors/explain-error.js';
import { OutboxError } from '../errors/outbox-error.js';
import { byPartition, partitionLayout, type Partitions } from '../redis/partitions.js';
import { pushEvents } from '../redis/scripts.js';
import { layoutMismatch } from '../redis/partition-layout.js';

/** A row as the relay pushes it: its id (what it marks), its aggregate (its partition) and its message (`toMessage`'s text). */
export interface RowToPush {
  id: number;
  aggregate_id: string;
  message: string;
}

export type PushOutcome =
  /** Every partition took its rows; `pushedAt`: Redis's clock when the last of them reached its queue. */
  | { status: 'ok'; pushedAt: number }
  /** A partition serves no store (it lost its state): the relay pairs again. Other partitions may have taken theirs: duplicates. */
  | { status: 'unclaimed' }
  /** A partition serves another store. */
  | { status: 'foreign'; redis: Redis; servedStore: string };

/**
 * Pushes a batch of rows, each to its aggregate's partition (in id order within each), the
 * partitions at once. A row is marked PUBLISHED only once every push of its batch was acknowledged;
 * a push that fails leaves the whole batch to be pushed again: duplicates, never loss. A partition
 * claimed for another number of partitions is a setting to fix (exit 2); a failed push, exit 5.
 */
export async function pushRows(partitions: Partitions, storeId: string, rows: RowToPush[]): Promise<PushOutcome> {
  const groups = [...byPartition(partitions, rows, (row) => row.aggregate_id)];
  let results;
  try {
    results = await Promise.all(
      groups.map(async ([index, group]) => {
        const redis = partitions.clients[index];
        const layout = partitionLayout(index, partitions.count);
        return { redis, layout, result: await pushEvents(redis, storeId, group.map((row) => row.message), layout) };
      }),
    );
  } catch (error) {
    const reason = explainError(error)?.message ?? (error instanceof Error ? error.message : String(error));
    throw new OutboxError(`cannot relay outbox rows ${rows[0].id}-${rows[rows.length - 1].id}: ${reason}`, 5);
  }
  let pushedAt = 0;
  for (const { redis, layout, result } of results) {
    if (result.status === 'layout') throw layoutMismatch(redis, layout, result.servedLayout);
    if (result.status === 'foreign') return { status: 'foreign', redis, servedStore: result.servedStore };
    if (result.status === 'unclaimed') return { status: 'unclaimed' };
    pushedAt = Math.max(pushedAt, result.pushedAt);
  }
  return { status: 'ok', pushedAt };
}
