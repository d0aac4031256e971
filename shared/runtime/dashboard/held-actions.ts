import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { dropHeld, listHeld, retryHeld, type HeldKind, type HeldMessage } from '../../operations/recovery/held-messages.js';

/** How many entries of each table the page shows (the oldest first); the totals are shown beside. */
export const SHOWN_HELD = 50;

/** A held message as the page shows it. */
export interface HeldRow {
  /**
   * What an action names: a parked entry's field (`order:7:2`); a dead letter's digest (its list
   * index moves when an entry before it goes, its bytes do not); with partitions, the digest after
   * its partition's index (`2:<digest>`): the same bytes may be dead-lettered in two partitions.
   */
  key: string;
  /** As `outbox dead-letter list` / `outbox parked list` show it (with partitions, a dead letter's is `<partition>:<index>`). */
  id: string;
  at: number;
  reason: string;
  message: string;
}

export type HeldAction = 'retry' | 'drop';

/** The outcome of one action: done, gone meanwhile, or refused (not an envelope the consumer writes: drop it). */
export type HeldOutcome = 'done' | 'gone' | 'refused';

function keyOf(kind: HeldKind, h: HeldMessage): string {
  if (kind === 'parked') return h.id;
  const digest = createHash('sha256').update(h.handle as Buffer).digest('hex').slice(0, 32);
  return h.partition === undefined ? digest : `${h.partition}:${digest}`;
}

/** The oldest SHOWN_HELD of `kind`, over every partition. */
export async function heldRows(redis: Redis | Partitions, kind: HeldKind): Promise<HeldRow[]> {
  return (await listHeld(redis, kind, SHOWN_HELD)).map((h) => ({ key: keyOf(kind, h), id: h.id, at: h.at, reason: h.reason, message: h.message.slice(0, 500) }));
}

/**
 * Retries or drops the one entry `key` names, with the operations `outbox dead-letter` and
 * `outbox parked` use (a retry puts a dead letter back at the tail of the queue, a parked event at
 * its head; a drop deletes it for good), in the partition it was found in.
 */
export async function actOnHeld(redis: Redis | Partitions, kind: HeldKind, action: HeldAction, key: string): Promise<HeldOutcome> {
  const held = (await listHeld(redis, kind)).find((h) => keyOf(kind, h) === key);
  if (held === undefined) return 'gone';
  const result = action === 'retry' ? await retryHeld(redis, kind, [held]) : await dropHeld(redis, kind, [held]);
  return result.done === 1 ? 'done' : result.refused === 1 ? 'refused' : 'gone';
}
