import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { bumpReplayGeneration } from '../../outbox/store/store-meta.js';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { createRelay } from '../../outbox/relay/relay.js';
import { describePairing, type Pairing } from '../../outbox/relay/store-pairing.js';
import type { StoreSource } from '../status.js';
import type { Partitions } from '../../outbox/redis/partitions.js';

const CHUNK = 500;

/**
 * Sets the given events' rows back to PENDING and relays them (with any other PENDING row): the
 * consumer's dedupe makes a republished event safe even if it was not lost after all.
 */
export async function republish(db: Db, redis: Redis | Partitions, eventIds: string[]): Promise<{ reset: number; relayed: number }> {
  const resetOne = db.prepare<[string]>("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE event_id = ? AND status = 'PUBLISHED'");
  const resetAll = db.transaction((ids: string[]) => {
    bumpReplayGeneration(db);
    return ids.reduce((n, id) => n + resetOne.run(id).changes, 0);
  });
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

/** A row as a dry run and a question show it. */
export interface RowToChange {
  id: number;
  event_id: string;
  /** The aggregate key, e.g. `order:7`. */
  aggregate_id: string;
  seq: number;
  event_type: string;
  created_at: number;
}

/** What a replay of `range` would set back to PENDING: how many rows, their id range, the first ones. */
export interface ReplayPlan {
  count: number;
  firstId: number | null;
  lastId: number | null;
  firstRows: RowToChange[];
}

const COLUMNS = 'id, event_id, aggregate_id, seq, event_type, created_at';

/** The column a range bounds: the row id, or created_at for times. */
export function rangeColumn(range: ReplayRange): string {
  return range.kind === 'id' ? 'id' : 'created_at';
}

export function planReplay(db: Db, range: ReplayRange, shown: number): ReplayPlan {
  const where = `status = 'PUBLISHED' AND ${rangeColumn(range)} BETWEEN ? AND ?`;
  const { count, firstId, lastId } = db
    .prepare<[number, number], { count: number; firstId: number | null; lastId: number | null }>(
      `SELECT COUNT(*) AS count, MIN(id) AS firstId, MAX(id) AS lastId FROM outbox WHERE ${where}`,
    )
    .get(range.from, range.to)!;
  const firstRows = db.prepare<[number, number, number], RowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE ${where} ORDER BY id LIMIT ?`).all(range.from, range.to, shown);
  return { count, firstId, lastId, firstRows };
}

/**
 * Sets a range of PUBLISHED rows, up to row `throughId`, back to PENDING (e.g. after a Redis
 * without persistence lost its queue); the relay then republishes them and the consumer skips what
 * it already applied. `throughId` keeps a confirmed replay to the rows it showed.
 */
export function replay(db: Db, range: ReplayRange, throughId = Number.MAX_SAFE_INTEGER): number {
  const update = db.prepare<[number, number, number]>(
    `UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED' AND ${rangeColumn(range)} BETWEEN ? AND ? AND id <= ?`,
  );
  return db
    .transaction(() => {
      bumpReplayGeneration(db);
      return update.run(range.from, range.to, throughId).changes;
    })
    .immediate();
}

/** The rows of the given events, in id order, up to `shown` of them: what a repair would republish. */
export function rowsOfEvents(db: Db, eventIds: string[], shown: number): RowToChange[] {
  const select = db.prepare<[string], RowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE event_id = ?`);
  return eventIds
    .map((id) => select.get(id))
    .filter((row): row is RowToChange => row !== undefined)
    .sort((a, b) => a.id - b.id)
    .slice(0, shown);
}

/** The PUBLISHED rows a rebuild sets back to PENDING: how many, their id range (0-0 when none), the first ones. */
export interface PublishedRows {
  count: number;
  firstId: number;
  lastId: number;
  firstRows: RowToChange[];
}

/**
 * What `verify --repair` and `replay` change in the outbox store, whichever it is: app.db
 * (`sqliteRecovery`) or PostgreSQL (`pgRecovery`, pg-repair.ts).
 */
export interface RecoveryStore {
  source: StoreSource;
  /** The PUBLISHED rows, up to `shown` of them listed; `inLost`: of the aggregates it accepts only (the partitions that lost their state). */
  publishedRows(shown: number, inLost?: (aggregate: string) => boolean): Promise<PublishedRows>;
  rowsOfEvents(eventIds: string[], shown: number): Promise<RowToChange[]>;
  /** Sets the events' rows back to PENDING and relays every PENDING row. */
  republish(redis: Redis | Partitions, eventIds: string[]): Promise<{ reset: number; relayed: number }>;
  /** Relays every PENDING row, pairing first: a Redis (or the partitions of it) that lost its state is rebuilt from the store. */
  rebuild(redis: Redis | Partitions, onPairing: (pairing: Exclude<Pairing, { kind: 'paired' }>) => void): Promise<{ events: number }>;
  planReplay(range: ReplayRange, shown: number): Promise<ReplayPlan>;
  replay(range: ReplayRange, throughId: number): Promise<number>;
  /** Events pruned from the store, of the aggregates `inLost` accepts (all when undefined): what a rebuild cannot bring back. */
  prunedEvents(inLost?: (aggregate: string) => boolean): Promise<{ events: number; aggregates: number }>;
}

/** Sums outbox_pruned's rows of the aggregates `inLost` accepts. */
export function prunedOf(rows: { aggregate_id: string; events: number }[], inLost?: (aggregate: string) => boolean): { events: number; aggregates: number } {
  const mine = inLost ? rows.filter((row) => inLost(row.aggregate_id)) : rows;
  return { events: mine.reduce((n, row) => n + row.events, 0), aggregates: mine.length };
}

/** `describePairing` of a rebuild, naming the store's database. */
export const describeRebuild = (store: RecoveryStore, pairing: Exclude<Pairing, { kind: 'paired' }>) => describePairing(pairing, store.source);

/** The recovery of app.db. */
export function sqliteRecovery(db: Db): RecoveryStore {
  return {
    source: 'SQLite',
    async publishedRows(shown, inLost) {
      // With partitions, the relay rebuilds the ones that lost their state only: their aggregates' rows.
      if (inLost) db.function('outbox_in_lost_partition', { deterministic: true }, (aggregate) => (inLost(String(aggregate)) ? 1 : 0));
      const where = `status = 'PUBLISHED'${inLost ? ' AND outbox_in_lost_partition(aggregate_id) = 1' : ''}`;
      const { count, firstId, lastId } = db
        .prepare<[], { count: number; firstId: number | null; lastId: number | null }>(`SELECT COUNT(*) AS count, MIN(id) AS firstId, MAX(id) AS lastId FROM outbox WHERE ${where}`)
        .get()!;
      const firstRows = db.prepare<[number], RowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE ${where} ORDER BY id LIMIT ?`).all(shown);
      return { count, firstId: firstId ?? 0, lastId: lastId ?? 0, firstRows };
    },
    rowsOfEvents: async (eventIds, shown) => rowsOfEvents(db, eventIds, shown),
    republish: (redis, eventIds) => republish(db, redis, eventIds),
    rebuild: (redis, onPairing) => createRelay(db, redis, { onPairing }).relayAll(),
    planReplay: async (range, shown) => planReplay(db, range, shown),
    replay: async (range, throughId) => replay(db, range, throughId),
    prunedEvents: async (inLost) => prunedOf(db.prepare<[], { aggregate_id: string; events: number }>('SELECT aggregate_id, events FROM outbox_pruned').all(), inLost),
  };
}
