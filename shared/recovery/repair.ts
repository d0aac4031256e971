import type { Redis } from 'ioredis';
import type { Db } from '../db/open-database.js';
import { InvalidInputError } from '../errors/invalid-input-error.js';
import { createRelay } from '../relay/relay.js';

const CHUNK = 500;

/**
 * Sets the given events' rows back to PENDING and relays them (with any other PENDING row): the
 * consumer's dedupe makes a republished event safe even if it was not lost after all.
 */
export async function republish(db: Db, redis: Redis, eventIds: string[]): Promise<{ reset: number; relayed: number }> {
  const resetOne = db.prepare<[string]>("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE event_id = ? AND status = 'PUBLISHED'");
  const resetAll = db.transaction((ids: string[]) => ids.reduce((n, id) => n + resetOne.run(id).changes, 0));
  let reset = 0;
  for (let i = 0; i < eventIds.length; i += CHUNK) reset += resetAll.immediate(eventIds.slice(i, i + CHUNK));
  const { events } = await createRelay(db, redis).relayAll();
  return { reset, relayed: events };
}

export interface ReplayRange {
  kind: 'id' | 'time';
  from: number;
  to: number;
}

function bound(raw: string, name: string): { kind: 'id' | 'time'; value: number } {
  if (/^\d+$/.test(raw)) return { kind: 'id', value: Number(raw) };
  const time = Date.parse(raw);
  if (Number.isNaN(time)) {
    throw new InvalidInputError(`${name} must be an outbox row id or a time like 2026-11-30T08:00:00Z, got ${JSON.stringify(raw)}`);
  }
  return { kind: 'time', value: time };
}

/** Parses --from / --to: both row ids, or both times (ISO 8601); --to defaults to the end. */
export function parseReplayRange(from: string, to?: string): ReplayRange {
  const start = bound(from, '--from');
  const end = to === undefined ? { kind: start.kind, value: Number.MAX_SAFE_INTEGER } : bound(to, '--to');
  if (end.kind !== start.kind) throw new InvalidInputError('--from and --to must both be row ids or both be times');
  if (end.value < start.value) throw new InvalidInputError(`--to (${to}) is before --from (${from})`);
  return { kind: start.kind, from: start.value, to: end.value };
}

/**
 * Sets a range of PUBLISHED rows back to PENDING (e.g. after a Redis without persistence lost its
 * queue); the relay then republishes them and the consumer skips what it already applied.
 */
export function replay(db: Db, range: ReplayRange): number {
  const column = range.kind === 'id' ? 'id' : 'created_at';
  const update = db.prepare<[number, number]>(
    `UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED' AND ${column} BETWEEN ? AND ?`,
  );
  return db.transaction(() => update.run(range.from, range.to).changes).immediate();
}
