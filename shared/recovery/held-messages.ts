import type { Redis } from 'ioredis';
import { InvalidInputError } from '../errors/invalid-input-error.js';
import { keys } from '../redis/keys.js';
import { requeueDeadLetter, requeueParked } from '../redis/scripts.js';

/** A message the consumer set aside: dead-lettered (id = list index) or parked (id = "<aggregate>:<seq>"). */
export interface HeldMessage {
  id: string;
  reason: string;
  at: number;
  message: string;
  /** The stored entry (dead letters) or field (parked), used to move or drop exactly this one. */
  handle: string;
}

export type HeldKind = 'dead-letter' | 'parked';

export async function listHeld(redis: Redis, kind: HeldKind): Promise<HeldMessage[]> {
  if (kind === 'dead-letter') {
    const entries = await redis.lrange(keys.deadLetter, 0, -1);
    return entries.map((entry, index) => {
      const { reason, message, deadAt } = JSON.parse(entry) as { reason: string; message: string; deadAt: number };
      return { id: String(index), reason, at: deadAt, message, handle: entry };
    });
  }
  const fields = await redis.hgetall(keys.parked);
  return Object.entries(fields)
    .map(([field, envelope]) => {
      const { reason, message, parkedAt } = JSON.parse(envelope) as { reason: string; message: string; parkedAt: number };
      return { id: field, reason, at: parkedAt, message, handle: field };
    })
    .sort((a, b) => a.at - b.at);
}

/** The held messages `ids` names (all of them when `all`); unknown ids are an error, before anything changes. */
export async function selectHeld(redis: Redis, kind: HeldKind, ids: string[], all: boolean): Promise<HeldMessage[]> {
  const held = await listHeld(redis, kind);
  if (all) return held;
  if (ids.length === 0) throw new InvalidInputError(`name the ${kind} entries with --id (see "outbox ${kind} list"), or pass --all`);
  const byId = new Map(held.map((h) => [h.id, h]));
  const unknown = ids.filter((id) => !byId.has(id));
  if (unknown.length > 0) throw new InvalidInputError(`no ${kind} entry ${unknown.join(', ')} (see "outbox ${kind} list")`);
  return ids.map((id) => byId.get(id)!);
}

/** Puts the messages back on the queue: dead letters at the tail, parked events at the head. */
export async function retryHeld(redis: Redis, kind: HeldKind, held: HeldMessage[]): Promise<number> {
  let moved = 0;
  for (const h of held) if (await (kind === 'dead-letter' ? requeueDeadLetter(redis, h.handle) : requeueParked(redis, h.handle))) moved += 1;
  return moved;
}

export async function dropHeld(redis: Redis, kind: HeldKind, held: HeldMessage[]): Promise<number> {
  let dropped = 0;
  for (const h of held) dropped += kind === 'dead-letter' ? await redis.lrem(keys.deadLetter, 1, h.handle) : await redis.hdel(keys.parked, h.handle);
  return dropped;
}
