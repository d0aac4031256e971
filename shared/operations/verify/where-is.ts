import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { keys } from '../../outbox/redis/keys.js';
import { guardKeyOf } from '../../outbox/redis/guards.js';
import { recordedProcessingLists, scannedProcessingLists } from '../../outbox/redis/processing-lists.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { mayBeSwept, WINDOW_FIELDS, windowStateOf } from '../../outbox/redis/dedupe-window.js';
import { execAll } from './consumer-state.js';
import { verifyReadsOf, type VerifyReads } from './store-snapshot.js';

const CHUNK = 1000;

/** Looks up `fields` in a hash in chunks; resolves the values in the same order. */
async function hashValues(redis: Redis, key: string, fields: string[]): Promise<(string | null)[]> {
  const chunks: Promise<(string | null)[]>[] = [];
  for (let i = 0; i < fields.length; i += CHUNK) chunks.push(redis.hmget(key, ...fields.slice(i, i + CHUNK)));
  return (await Promise.all(chunks)).flat();
}

/** Of these events, the ones not applied yet (in any partition) and the rows still PENDING: what a settle waits for. */
export async function stillInFlight(store: Db | VerifyReads, redis: Redis | Partitions, eventIds: string[]): Promise<string[]> {
  if (eventIds.length === 0) return [];
  const each = await Promise.all(partitionsOf(redis).clients.map((client) => hashValues(client, keys.processed, eventIds)));
  const pending = await verifyReadsOf(store).pendingOf(eventIds);
  return eventIds.filter((id, i) => each.every((values) => values[i] === null) || pending.has(id));
}

/** Messages the LPOS calls of one `whereIsAmong` MULTI walk at most (but always one event's lists whole). */
const LPOS_BUDGET = 100_000;

type Whereabouts = { event_id: string; aggregate_id: string; seq: number; message: string; created_at: number };

/**
 * Where each event is, in one atomic look (MULTI) at its aggregate's partition: applied, queued, in
 * a processing list or parked. Resolves the ids found nowhere. `messages` are the events' messages
 * exactly as the relay pushes them. An event whose records the dedupe window swept is applied (see
 * `Observation.swept`), judged by the applied seq and window hash of the same look.
 */
export async function whereIs(redis: Redis | Partitions, events: Whereabouts[]): Promise<string[]> {
  const partitions = partitionsOf(redis);
  if (partitions.count === 1) return whereIsIn(partitions.clients[0], events);
  const groups = byPartition(partitions, events, (e) => e.aggregate_id);
  const nowhere = new Set((await Promise.all([...groups].map(([index, group]) => whereIsIn(partitions.clients[index], group)))).flat());
  return events.map((e) => e.event_id).filter((id) => nowhere.has(id));
}

/**
 * `whereIs` in one partition: first among the processing lists the takes recorded; the events
 * found nowhere there are looked for again among every list a SCAN finds (one taken into a list
 * recorded after the first look, or in a list no take recorded), so that the keyspace is walked only
 * when something is unaccounted for.
 */
async function whereIsIn(redis: Redis, events: Whereabouts[]): Promise<string[]> {
  const first = await whereIsAmong(redis, events, await recordedProcessingLists(redis));
  if (first.length === 0) return first;
  const missing = new Set(first);
  return whereIsAmong(redis, events.filter((e) => missing.has(e.event_id)), await scannedProcessingLists(redis));
}

/**
 * The events found nowhere in one atomic look (MULTI) at the processed and parked hashes, the queue
 * and `processing`; nor swept (no apply count, seq within the applied seq, committed by `sweptThrough`).
 */
async function whereIsAmong(redis: Redis, events: Whereabouts[], processing: string[]): Promise<string[]> {
  const lists: string[] = [keys.events, ...processing];
  const nowhere: string[] = [];
  const read = [keys.processed, keys.parked, keys.applyCount, keys.appliedSeq, keys.appliedSeq, ...lists];
  const per = read.length;
  // Each LPOS walks its list: fewer events per MULTI when the lists are long (a backlog), so that one
  // MULTI walks about 100,000 messages at most (a few ms), one event's look always whole.
  const lengths = await Promise.all(lists.map((list) => redis.llen(list)));
  const step = Math.max(1, Math.min(50, Math.floor(LPOS_BUDGET / Math.max(1, lengths.reduce((n, l) => n + l, 0)))));
  for (let i = 0; i < events.length; i += step) {
    const chunk = events.slice(i, i + step);
    const multi = redis.multi().hmget(keys.window, ...WINDOW_FIELDS).hget(keys.meta, 'store');
    for (const e of chunk) {
      multi.hexists(keys.processed, e.event_id).hexists(keys.parked, `${e.aggregate_id}:${e.seq}`);
      multi.hexists(keys.applyCount, e.event_id).hget(guardKeyOf(e.aggregate_id), e.aggregate_id).hget(keys.appliedSeq, e.aggregate_id);
      for (const list of lists) multi.lpos(list, e.message);
    }
    const replies = await execAll(multi, (i) => (i === 0 ? keys.window : i === 1 ? keys.meta : read[(i - 2) % per]));
    const window = windowStateOf(replies[0] as (string | null)[]);
    const served = replies[1] !== null;
    chunk.forEach((e, j) => {
      const [applied, parked, counted, bucketSeq, legacySeq, ...positions] = replies.slice(2 + j * per, 2 + (j + 1) * per);
      const appliedSeq = bucketSeq ?? legacySeq;
      const swept = served && counted === 0 && e.seq <= Number(appliedSeq ?? 0) && mayBeSwept(e.created_at, window);
      if (applied === 0 && parked === 0 && !swept && positions.every((p) => p === null)) nowhere.push(e.event_id);
    });
  }
  return nowhere;
}
