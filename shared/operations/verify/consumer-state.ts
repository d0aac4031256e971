import type { Redis } from 'ioredis';
import { eventIdOf } from '../../outbox/store/events.js';
import { keys } from '../../outbox/redis/keys.js';
import { recordedProcessingLists, scannedProcessingLists } from '../../outbox/redis/processing-lists.js';
import { readEnvelope } from '../../outbox/redis/envelope.js';
import { readList, readListBackwards } from '../../outbox/redis/read-list.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { WINDOW_FIELDS, windowStateOf, type WindowState } from '../../outbox/redis/dedupe-window.js';

/** Event ids on their way: queued or in a processing list (parked ones are added later), and the dead-lettered ones. */
export interface Flight {
  ids: Set<string>;
  queued: number;
  processing: number;
  /** The event ids in the dead-letter lists, set aside until an operator retries them. */
  dead: Set<string>;
}

/** One partition's consumer state at its MULTI's instant, and its parked hash read before it (see `observe`). */
export interface ConsumerState {
  meta: Record<string, string>;
  processedCount: number;
  counters: Record<string, Record<string, string>>;
  stats: Record<string, string>;
  /** The parked hash, read by HSCAN after the lists and before the MULTI. */
  parked: Record<string, string>;
  dead: number;
  appliedCounter: number;
  /** The window hash at the MULTI: its `sweptEvents` are applied events that left the processed count. */
  window: WindowState;
}

/**
 * Runs a MULTI and resolves its replies, throwing the first error. A MULTI's errors carry no
 * command: `keyOf(i)` names the key of its i-th, which a WRONGTYPE error then names (explainError).
 */
export async function execAll(multi: ReturnType<Redis['multi']>, keyOf: (i: number) => string): Promise<unknown[]> {
  return (await multi.exec())!.map(([error, value], i) => {
    if (error) throw Object.assign(error, { command: { name: 'multi', args: [keyOf(i)] } });
    return value;
  });
}

export function appliedCounterOf(text: string | null | undefined): number {
  const counter = Number(text ?? 0);
  return Number.isFinite(counter) ? counter : Infinity;
}

/** Event ids on their way in a list of any partition: queued or in a processing list. */
export async function inFlight(partitions: Partitions, scanLists: boolean): Promise<Flight> {
  const flights = await Promise.all(partitions.clients.map((redis) => inFlightIn(redis, scanLists)));
  return {
    ids: new Set(flights.flatMap((f) => [...f.ids])),
    queued: flights.reduce((n, f) => n + f.queued, 0),
    processing: flights.reduce((n, f) => n + f.processing, 0),
    dead: new Set(flights.flatMap((f) => [...f.dead])),
  };
}

/**
 * Event ids on their way in one partition's lists: the queue, and the processing lists the takes
 * recorded, or with `scanLists` every one a SCAN finds (a list no take recorded is one a consumer
 * left when it died after the set of lists was lost).
 */
async function inFlightIn(redis: Redis, scanLists: boolean): Promise<Flight> {
  const ids = new Set<string>();
  const add = (message: string) => {
    const id = eventIdOf(message);
    if (id) ids.add(id);
  };
  let queued = 0;
  let processing = 0;
  // The queue before the processing lists, and their names after it: a take moves a message from
  // the one to the other in the step that records its list's name. Each read back to front, so
  // that the consumers' takes and acks at the heads skip nothing.
  for await (const message of readListBackwards(redis, keys.events)) {
    queued += 1;
    add(message);
  }
  for (const list of scanLists ? await scannedProcessingLists(redis) : await recordedProcessingLists(redis)) {
    for await (const message of readListBackwards(redis, list)) {
      processing += 1;
      add(message);
    }
  }
  const dead = new Set<string>();
  for await (const entry of readList(redis, keys.deadLetter)) {
    const id = idOfEnvelope(entry);
    if (id) dead.add(id);
  }
  return { ids, queued, processing, dead };
}

/** The event id of a parked or dead-lettered entry's message; undefined for an entry that is not one. */
export function idOfEnvelope(envelope: string): string | undefined {
  const message = readEnvelope(envelope)?.message;
  return message === undefined ? undefined : eventIdOf(message);
}

/** Every field of a hash by HSCAN (COUNT 1000 a call: no call holds Redis long). */
export async function scanHash(redis: Redis, key: string): Promise<Record<string, string>> {
  const hash: Record<string, string> = {};
  let cursor = '0';
  do {
    const [next, entries] = await redis.hscan(key, cursor, 'COUNT', 1000);
    for (let i = 0; i < entries.length; i += 2) hash[entries[i]] = entries[i + 1];
    cursor = next;
  } while (cursor !== '0');
  return hash;
}

/**
 * The consumer's state at one instant, in one MULTI of small reads: the processed count and the
 * window's swept count (which the sweep moves together), the stats hash's `applied` counter N and
 * the check set's counter hashes. The hashes that grow with history are read after it, in chunks.
 */
export async function readConsumerState(redis: Redis, counterHashes: readonly string[], parked: Record<string, string>): Promise<ConsumerState> {
  const multi = redis.multi().hgetall(keys.meta).hlen(keys.processed).hgetall(keys.stats).llen(keys.deadLetter).hmget(keys.window, ...WINDOW_FIELDS);
  for (const key of counterHashes) multi.hgetall(key);
  const read = [keys.meta, keys.processed, keys.stats, keys.deadLetter, keys.window, ...counterHashes];
  const values = await execAll(multi, (i) => read[i]);
  const [meta, processedCount, stats, dead, window, ...counterValues] = values as [
    Record<string, string>,
    number,
    Record<string, string>,
    number,
    (string | null)[],
    ...Record<string, string>[],
  ];
  const counters = Object.fromEntries(counterHashes.map((key, i) => [key, counterValues[i]]));
  return { meta, processedCount, counters, stats, parked, dead, appliedCounter: appliedCounterOf(stats.applied), window: windowStateOf(window) };
}

export const INTEGER = /^-?\d+$/;

/** Hashes of counters summed field by field; a value that is not an integer is kept as it is (a corrupt entry, named per partition). */
export function sumHashes(hashes: Record<string, string>[]): Record<string, string> {
  if (hashes.length === 1) return hashes[0];
  const sum: Record<string, string> = {};
  for (const hash of hashes) {
    for (const [field, value] of Object.entries(hash)) {
      const before = sum[field];
      sum[field] = before === undefined ? value : INTEGER.test(before) && INTEGER.test(value) ? String(Number(before) + Number(value)) : INTEGER.test(before) ? value : before;
    }
  }
  return sum;
}

/** Apply-count texts of one event over the partitions, summed as `sumHashes` does; undefined for none. */
export function sumCounts(values: (string | null | undefined)[]): string | undefined {
  let sum: string | undefined;
  for (const value of values) {
    if (value === null || value === undefined) continue;
    sum = sum === undefined ? value : INTEGER.test(sum) && INTEGER.test(value) ? String(Number(sum) + Number(value)) : INTEGER.test(sum) ? value : sum;
  }
  return sum;
}
