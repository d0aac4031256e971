import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import { REPLAY_LOCK } from '../../outbox/postgres/locks.js';
import { createPgRelay } from '../../outbox/postgres/pg-relay.js';
import type { RowToChange } from './repair.js';
import type { Partitions } from '../../outbox/redis/partitions.js';

interface PgRowToChange {
  id: string;
  event_id: string;
  aggregate_id: string;
  seq: string;
  event_type: string;
  created_at: string;
}

const COLUMNS = 'id, event_id, aggregate_id, seq, event_type, created_at';
const toRow = (row: PgRowToChange): RowToChange => ({ ...row, id: Number(row.id), seq: Number(row.seq), created_at: Number(row.created_at) });

/**
 * `republish` on PostgreSQL: sets the given events' PUBLISHED rows back to PENDING in one transaction
 * (under the replay lock, as the relay's rebuild, so no relay batch is between claim and commit
 * meanwhile), then relays every PENDING row. The consumer's dedupe makes a republished event safe
 * even if it was not lost after all.
 */
export async function pgRepublish(pool: Pool, redis: Redis | Partitions, eventIds: string[]): Promise<{ reset: number; relayed: number }> {
  const client = await pool.connect();
  let reset = 0;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [REPLAY_LOCK]);
    await client.query("UPDATE outbox_meta SET value = (value::bigint + 1)::text WHERE key = 'replay_generation'");
    reset = (await client.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE event_id = ANY($1) AND status = 'PUBLISHED'", [eventIds])).rowCount ?? 0;
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
  const { events } = await createPgRelay(pool, redis).relayAll();
  return { reset, relayed: events };
}

/** The rows of the given events, in id order, up to `shown`: what a repair would republish. */
export async function pgRowsOfEvents(pool: Pool, eventIds: string[], shown: number): Promise<RowToChange[]> {
  const { rows } = await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE event_id = ANY($1) ORDER BY id LIMIT $2`, [eventIds, shown]);
  return rows.map(toRow);
}

/**
 * The PUBLISHED rows a rebuild sets back to PENDING: how many, their id range, the first `shown`.
 * `inLost`: only the aggregates it accepts (the partitions that lost their state).
 */
export async function pgPublishedRows(
  pool: Pool,
  shown: number,
  inLost?: (aggregate: string) => boolean,
): Promise<{ count: number; firstId: number; lastId: number; firstRows: RowToChange[] }> {
  if (inLost) {
    const { rows: perAggregate } = await pool.query<{ aggregate_id: string; count: string; first: string; last: string }>(
      "SELECT aggregate_id, COUNT(*) AS count, MIN(id) AS first, MAX(id) AS last FROM outbox WHERE status = 'PUBLISHED' GROUP BY aggregate_id",
    );
    const mine = perAggregate.filter((a) => inLost(a.aggregate_id));
    const firstRows = (
      await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE status = 'PUBLISHED' AND aggregate_id = ANY($1) ORDER BY id LIMIT $2`, [mine.map((a) => a.aggregate_id), shown])
    ).rows.map(toRow);
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
  const firstRows = (await pool.query<PgRowToChange>(`SELECT ${COLUMNS} FROM outbox WHERE status = 'PUBLISHED' ORDER BY id LIMIT $1`, [shown])).rows.map(toRow);
  return { count: Number(rows[0].count), firstId: Number(rows[0].first ?? 0), lastId: Number(rows[0].last ?? 0), firstRows };
}
