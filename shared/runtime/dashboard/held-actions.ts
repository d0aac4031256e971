import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { dropHeld, listHeld, retryHeld, type HeldKind, type HeldMessage } from '../../operations/recovery/held-messages.js';

/** How many entries of each table the page shows (the oldest first); the totals are shown beside. */
export const SHOWN_HELD = 50;

/** A held message as the page shows it. */
export interface HeldRow {
  /**
   * What an action names: a parked entry's field (`order:7:2`); a dead letter's digest (its list
   * index moves when an entry before it goes, its bytes do not).
   */
  key: string;
  /** As `outbox dead-letter list` / `outbox parked list` show it. */
  id: string;
  at: number;
  reason: string;
  message: string;
}

export type HeldAction = 'retry' | 'drop';

/** The outcome of one action: done, gone meanwhile, or refused (not an envelope the consumer writes: drop it). */
export type HeldOutcome = 'done' | 'gone' | 'refused';

const keyOf = (kind: HeldKind, h: HeldMessage) =>
  kind === 'parked' ? h.id : createHash('sha256').update(h.handle as Buffer).digest('hex').slice(0, 32);

export async function heldRows(redis: Redis, kind: HeldKind): Promise<HeldRow[]> {
  return (await listHeld(redis, kind, SHOWN_HELD)).map((h) => ({ key: keyOf(kind, h), id: h.id, at: h.at, reason: h.reason, message: h.message.slice(0, 500) }));
}

/**
 * Retries or drops the one entry `key` names, with the operations `outbox dead-letter` and
 * `outbox parked` use (a retry puts a dead letter back at the tail of the queue, a parked event at
 * its head; a drop deletes it for good).
 */
export async function actOnHeld(redis: Redis, kind: HeldKind, action: HeldAction, key: string): Promise<HeldOutcome> {
  const held = (await listHeld(redis, kind)).find((h) => keyOf(kind, h) === key);
  if (held === undefined) return 'gone';
  const result = action === 'retry' ? await retryHeld(redis, kind, [held]) : await dropHeld(redis, kind, [held]);
  return result.done === 1 ? 'done' : result.refused === 1 ? 'refused' : 'gone';
}
