import type { Redis } from 'ioredis';
import type { Pool, PoolClient } from 'pg';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { REPLAY_LOCK } from '../../outbox/postgres/locks.js';
import { fromPgRow, type PgOutboxRow } from '../../outbox/postgres/pg-rows.js';
import { createPgRelay } from '../../outbox/postgres/pg-relay.js';
import { prunedOf, rangeColumn, type PublishedRows, type RecoveryStore, type ReplayPlan, type ReplayRange, type RowToChange } from './repair.js';

type PgRowToChange = Omit<PgOutboxRow, 'payload'>;

const COLUMNS = 'id, event_id, aggregate_id, seq, event_type, created_at';

/**
 * `republish` on PostgreSQL: sets the given events' PUBLISHED rows back to PENDING in one transaction
 * (under the replay lock, as the relay's rebuild, so no relay batch is between claim and commit
 * meanwhile), then relays every PENDING row. The consumer's dedupe makes a republished event safe
 * even if it was not lost after all.
 */
export async function pgRepublish(pool: Pool, redis: Redis | Partitions, eventIds: string[]): Promise<{ reset: number; relayed: number }> {
  const reset = await inReplayLock(pool, async (client) =>
    (await client.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE event_id = ANY($1) AND status = 'PUBLISHED'", [eventIds])).rowCount ?? 0,
  );
  const { events } = await createPgRelay(pool, redis).relayAll();
  return { reset, relayed: events };
}

/**
 * Runs `fn` in one transaction holding the replay lock exclusive (it waits for every relay batch
 * between claim and commit) with the replay generation bumped: what sets PUBLISHED rows back to PENDING.
 */
async function inReplayLock<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [REPLAY_LOCK]);
    await client.query("UPDATE outbox_meta SET value = (value::bigint + 1)::text WHERE key = 'replay_generation'");
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** The rows of the given events, in id order, up to `shown`: what a repair would republish. */
export async function pgRowsOfEvents(pool: Pool, eventIds: string[], shown: number): Promise<RowToChange[]> {
  const { rows } = await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE event_id = ANY($1) ORDER BY id LIMIT $2`, [eventIds, shown]);
  return rows.map(fromPgRow);
}

/** The PUBLISHED rows a rebuild sets back to PENDING: how many, their id range, the first `shown`. */
export async function pgPublishedRows(pool: Pool, shown: number, inLost?: (aggregate: string) => boolean): Promise<PublishedRows> {
  if (inLost) {
    // The partition function is the relay's (partitions.ts): the aggregates are picked here.
    const { rows: perAggregate } = await pool.query<{ aggregate_id: string; count: string; first: string; last: string }>(
      "SELECT aggregate_id, COUNT(*) AS count, MIN(id) AS first, MAX(id) AS last FROM outbox WHERE status = 'PUBLISHED' GROUP BY aggregate_id",
    );
    const mine = perAggregate.filter((a) => inLost(a.aggregate_id));
    const firstRows = (
      await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE status = 'PUBLISHED' AND aggregate_id = ANY($1) ORDER BY id LIMIT $2`, [mine.map((a) => a.aggregate_id), shown])
    ).rows.map(fromPgRow);
    return {
      count: mine.reduce((n, a) => n + Number(a.count), 0),
      firstId: mine.reduce((min, a) => (min === 0 ? Number(a.first) : Math.min(min, Number(a.first))), 0),
      lastId: mine.reduce((max, a) => Math.max(max, Number(a.last)), 0),
      firstRows,
    };
  }
  const { rows } = await pool.query<{ count: string; first: string | null; last: string | null }>(
    "SELECT COUNT(*) AS count, MIN(id) AS first, MAX(id) AS last FROM outbox WHERE status = 'PUBLISHED'",
  );
  const firstRows = (await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE status = 'PUBLISHED' ORDER BY id LIMIT $1`, [shown])).rows.map(fromPgRow);
  return { count: Number(rows[0].count), firstId: Number(rows[0].first ?? 0), lastId: Number(rows[0].last ?? 0), firstRows };
}

/** `planReplay` on PostgreSQL: what a replay of `range` would set back to PENDING. */
export async function pgPlanReplay(pool: Pool, range: ReplayRange, shown: number): Promise<ReplayPlan> {
  const where = `status = 'PUBLISHED' AND ${rangeColumn(range)} BETWEEN $1 AND $2`;
  const { rows } = await pool.query<{ count: string; first: string | null; last: string | null }>(
    `SELECT COUNT(*) AS count, MIN(id) AS first, MAX(id) AS last FROM outbox WHERE ${where}`,
    [range.from, range.to],
  );
  const firstRows = (await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE ${where} ORDER BY id LIMIT $3`, [range.from, range.to, shown])).rows.map(fromPgRow);
  const { count, first, last } = rows[0];
  return { count: Number(count), firstId: first === null ? null : Number(first), lastId: last === null ? null : Number(last), firstRows };
}

/**
 * `replay` on PostgreSQL: sets a range of PUBLISHED rows, up to row `throughId`, back to PENDING in
 * one transaction under the replay lock (as `pgRepublish`: no relay batch is between claim and
 * commit meanwhile, so none marks a row PUBLISHED after it was set back); the relays then push them
 * again and the consumer skips what it already applied.
 */
export async function pgReplay(pool: Pool, range: ReplayRange, throughId = Number.MAX_SAFE_INTEGER): Promise<number> {
  return inReplayLock(pool, async (client) =>
    (
      await client.query(
        `UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED' AND ${rangeColumn(range)} BETWEEN $1 AND $2 AND id <= $3`,
        [range.from, range.to, throughId],
      )
    ).rowCount ?? 0,
  );
}

/** The recovery of the PostgreSQL store. */
export function pgRecovery(pool: Pool): RecoveryStore {
  return {
    source: 'PostgreSQL',
    publishedRows: (shown, inLost) => pgPublishedRows(pool, shown, inLost),
    rowsOfEvents: (eventIds, shown) => pgRowsOfEvents(pool, eventIds, shown),
    republish: (redis, eventIds) => pgRepublish(pool, redis, eventIds),
    rebuild: (redis, onPairing) => createPgRelay(pool, redis, { onPairing }).relayAll(),
    planReplay: (range, shown) => pgPlanReplay(pool, range, shown),
    replay: (range, throughId) => pgReplay(pool, range, throughId),
    prunedEvents: async (inLost) =>
      prunedOf((await pool.query<{ aggregate_id: string; events: string }>('SELECT aggregate_id, events FROM outbox_pruned')).rows.map((row) => ({ aggregate_id: row.aggregate_id, events: Number(row.events) })), inLost),
  };
}
