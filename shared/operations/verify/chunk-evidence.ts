import { keys } from '../../outbox/redis/keys.js';
import { guardsOfReplies, queueGuardReads } from '../../outbox/redis/guards.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { WINDOW_FIELDS, windowStateOf, type WindowState } from '../../outbox/redis/dedupe-window.js';
import { appliedCounterOf, execAll } from './consumer-state.js';
import type { AggregateSlice } from './aggregate-stream.js';

/** One partition's instant of a chunk's MULTI. */
export interface PartitionRead {
  /** The stats hash's `applied` counter: the entries with an applyOrder up to it were applied by then. */
  counter: number;
  /** The window hash: a record missing from this MULTI and swept was swept by then. */
  window: WindowState;
  /** How many guards the partition holds (the scripts' count plus the old layout's fields). */
  guardCount: number;
}

/** What Redis holds of a chunk's aggregates and events, each partition's part read in one MULTI. */
export interface ChunkEvidence {
  /** By partition index; undefined for a partition the chunk did not read. */
  reads: (PartitionRead | undefined)[];
  /** Each aggregate's guard in its own partition (null: none). */
  guards: Map<string, string | null>;
  /** Each event's processed entry in its aggregate's partition (null: none). */
  processed: Map<string, string | null>;
  /** Each event's apply count in every partition, by index (an event applied in two partitions is applied twice). */
  applyCounts: Map<string, (string | null)[]>;
}

/**
 * Reads a chunk's evidence: in each partition one MULTI with its applied counter and window hash,
 * the guards of its aggregates (through guards.ts), the processed entries of their events, and the
 * apply counts of every event of the chunk. A chunk is about a thousand fields, so no MULTI holds
 * Redis for more than a millisecond or so; each is exact at its own instant.
 */
export async function readChunkEvidence(partitions: Partitions, slices: AggregateSlice[]): Promise<ChunkEvidence> {
  const evidence: ChunkEvidence = { reads: [], guards: new Map(), processed: new Map(), applyCounts: new Map() };
  const allIds = slices.flatMap((s) => s.events.map((e) => e.event_id));
  for (const id of allIds) evidence.applyCounts.set(id, new Array<string | null>(partitions.count).fill(null));
  const own: AggregateSlice[][] = partitions.clients.map(() => []);
  for (const slice of slices) own[partitions.count === 1 ? 0 : partitions.indexOf(slice.key)].push(slice);
  await Promise.all(
    partitions.clients.map(async (client, index) => {
      const mine = own[index];
      if (mine.length === 0 && allIds.length === 0) return;
      const aggregates = mine.map((s) => s.key);
      const ids = mine.flatMap((s) => s.events.map((e) => e.event_id));
      const multi = client.multi().hget(keys.stats, 'applied').hmget(keys.window, ...WINDOW_FIELDS).hget(keys.window, 'guards').hlen(keys.appliedSeq);
      const guardReplies = queueGuardReads(multi, aggregates);
      if (ids.length > 0) multi.hmget(keys.processed, ...ids);
      if (allIds.length > 0) multi.hmget(keys.applyCount, ...allIds);
      const names = [keys.stats, keys.window, keys.window, keys.appliedSeq];
      const replies = await execAll(multi, (i) =>
        i < names.length ? names[i] : i < names.length + guardReplies ? keys.appliedSeq : ids.length > 0 && i === names.length + guardReplies ? keys.processed : keys.applyCount,
      );
      const [counterText, windowValues, counted, legacy] = replies as [string | null, (string | null)[], string | null, number];
      evidence.reads[index] = {
        counter: appliedCounterOf(counterText),
        window: windowStateOf(windowValues),
        guardCount: Math.max(0, Number(counted ?? 0) || 0) + legacy,
      };
      let at = names.length;
      const guards = guardsOfReplies(replies.slice(at, at + guardReplies), aggregates);
      aggregates.forEach((aggregate, i) => evidence.guards.set(aggregate, guards[i]));
      at += guardReplies;
      if (ids.length > 0) {
        const values = replies[at++] as (string | null)[];
        ids.forEach((id, i) => evidence.processed.set(id, values[i]));
      }
      if (allIds.length > 0) {
        const counts = replies[at] as (string | null)[];
        allIds.forEach((id, i) => (evidence.applyCounts.get(id)![index] = counts[i]));
      }
    }),
  );
  return evidence;
}
