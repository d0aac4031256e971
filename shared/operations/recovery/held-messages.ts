import type { Redis } from 'ioredis';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { NotFoundError } from '../../outbox/errors/not-found-error.js';
import { readEnvelope, type Envelope } from '../../outbox/redis/envelope.js';
import { keys } from '../../outbox/redis/keys.js';
import { readGuard } from '../../outbox/redis/guards.js';
import { requeueDeadLetter, requeueParked } from '../../outbox/redis/scripts.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { parseMessage } from '../../outbox/store/parse-message.js';

/** A message the consumer set aside: dead-lettered (id = list index) or parked (id = "<aggregate>:<seq>"). */
export interface HeldMessage {
  /** With partitions, a dead letter's id is "<partition>:<index>" (a parked field names its aggregate, so it needs none). */
  id: string;
  /** With partitions: the partition it was found in, where a retry puts it back and a drop deletes it. */
  partition?: number;
  reason: string;
  at: number;
  /** The message, for display (bytes that are not UTF-8 show as U+FFFD). */
  message: string;
  /**
   * The stored entry as bytes (dead letters: LREM must match it byte for byte, invalid UTF-8
   * included) or the field (parked), used to move or drop exactly this one.
   */
  handle: Buffer | string;
}

export type HeldKind = 'dead-letter' | 'parked';

/** An envelope the consumer wrote; anything else is shown as it is, for an operator to drop. */
function shownEnvelope(stored: string): Envelope {
  return readEnvelope(stored) ?? { reason: 'not an envelope the consumer writes', message: stored, at: 0 };
}

/** The held messages, oldest first; the first `limit` only when given (the dashboard's tables). With partitions, every partition's. */
export async function listHeld(redis: Redis | Partitions, kind: HeldKind, limit = Infinity): Promise<HeldMessage[]> {
  const partitions = partitionsOf(redis);
  if (partitions.count === 1) return listHeldIn(partitions.clients[0], kind, limit);
  const each = await Promise.all(
    partitions.clients.map(async (client, partition) =>
      (await listHeldIn(client, kind, limit)).map((h) => ({ ...h, id: kind === 'dead-letter' ? `${partition}:${h.id}` : h.id, partition })),
    ),
  );
  // Stable: a partition's dead letters stay in their list's order.
  return each
    .flat()
    .sort((a, b) => a.at - b.at)
    .slice(0, limit);
}

/** The held messages of one partition (or of the one Redis). */
async function listHeldIn(redis: Redis, kind: HeldKind, limit: number): Promise<HeldMessage[]> {
  if (kind === 'dead-letter') {
    const entries = await redis.lrangeBuffer(keys.deadLetter, 0, Number.isFinite(limit) ? limit - 1 : -1);
    return entries.map((entry, index) => ({ id: String(index), ...shownEnvelope(entry.toString()), handle: entry }));
  }
  const fields = await redis.hgetall(keys.parked);
  return Object.entries(fields)
    .map(([field, stored]) => ({ id: field, ...shownEnvelope(stored), handle: field }))
    .sort((a, b) => a.at - b.at)
    .slice(0, limit);
}

/** The held messages `ids` names (all of them when `all`); unknown ids are an error, before anything changes. */
export async function selectHeld(redis: Redis | Partitions, kind: HeldKind, ids: string[], all: boolean): Promise<HeldMessage[]> {
  const held = await listHeld(redis, kind);
  if (all) return held;
  if (ids.length === 0) throw new InvalidInputError(`name the ${kind} entries with --id (see "outbox ${kind} list"), or pass --all`);
  const byId = new Map(held.map((h) => [h.id, h]));
  const unknown = ids.filter((id) => !byId.has(id));
  if (unknown.length > 0) throw new InvalidInputError(`no ${kind} entry ${unknown.join(', ')} (see "outbox ${kind} list")`);
  return ids.map((id) => byId.get(id)!);
}

/**
 * The dead letters whose event this Redis has applied since (its store's, at or below its aggregate's
 * applied seq, or with a processed entry): a wipe dead-letters the messages in flight ("this Redis
 * serves no store"), and the rebuild applies their events again, so those entries only mislead.
 */
export async function selectStaleDeadLetters(redis: Redis | Partitions): Promise<HeldMessage[]> {
  const partitions = partitionsOf(redis);
  const held = await listHeld(partitions, 'dead-letter');
  const stale: HeldMessage[] = [];
  for (const h of held) {
    let event;
    try {
      event = parseMessage(h.message);
    } catch {
      continue;
    }
    const client = partitions.clients[partitions.count === 1 ? 0 : partitions.indexOf(event.aggregateId)];
    const [store, seq, processed] = await Promise.all([client.hget(keys.meta, 'store'), readGuard(client, event.aggregateId), client.hexists(keys.processed, event.eventId)]);
    if (store === event.storeId && (processed === 1 || Number(seq ?? 0) >= event.seq)) stale.push(h);
  }
  return stale;
}

/** What a retry or drop did to the selected entries. */
export interface HeldResult {
  done: number;
  /** Gone meanwhile (another process moved or dropped them). */
  gone: number;
  /** Not an envelope the consumer writes: a retry cannot put them back (drop them). */
  refused: number;
}

/** The connection of the partition a held message was found in. */
function partitionOf(queues: Redis | Partitions, h: HeldMessage): Redis {
  return partitionsOf(queues).clients[h.partition ?? 0];
}

/** Puts the messages back on the queue: dead letters at the tail, parked events at the head. */
export async function retryHeld(queues: Redis | Partitions, kind: HeldKind, held: HeldMessage[]): Promise<HeldResult> {
  const result: HeldResult = { done: 0, gone: 0, refused: 0 };
  for (const h of held) {
    const redis = partitionOf(queues, h);
    const outcome = kind === 'dead-letter' ? await requeueDeadLetter(redis, h.handle as Buffer) : await requeueParked(redis, h.handle as string);
    if (outcome === 'moved') result.done += 1;
    else if (outcome === 'gone') result.gone += 1;
    else result.refused += 1;
  }
  return result;
}

export async function dropHeld(queues: Redis | Partitions, kind: HeldKind, held: HeldMessage[]): Promise<HeldResult> {
  const result: HeldResult = { done: 0, gone: 0, refused: 0 };
  for (const h of held) {
    const redis = partitionOf(queues, h);
    const dropped = kind === 'dead-letter' ? await redis.lrem(keys.deadLetter, 1, h.handle) : await redis.hdel(keys.parked, h.handle as string);
    if (dropped > 0) result.done += 1;
    else result.gone += 1;
  }
  return result;
}

/**
 * Throws when a retry or drop did not do all it was asked: a `NotFoundError` (exit 3) saying how
 * many entries were gone or refused, after the line that says what was done.
 */
export function assertAllDone(kind: HeldKind, action: 'retry' | 'drop', selected: number, result: HeldResult): void {
  if (result.done === selected) return;
  const parts = [];
  if (result.gone > 0) parts.push(`${result.gone} were no longer there (moved or dropped meanwhile)`);
  if (result.refused > 0) parts.push(`${result.refused} are not an envelope the consumer writes and cannot be retried (drop them)`);
  throw new NotFoundError(`${action} did ${result.done} of ${selected} ${kind} entr(ies): ${parts.join('; ')}: run "outbox ${kind} list" again`);
}
