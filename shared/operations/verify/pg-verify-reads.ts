import type { Pool, PoolClient } from 'pg';
import { EXAMPLES, type VerifyCheckSet } from '../../outbox/verify/verify-checks.js';
import { pgHasPublished, pgStoreIdOf } from '../../outbox/postgres/pg-store-meta.js';
import { fromPgRow, type PgOutboxRow } from '../../outbox/postgres/pg-rows.js';
import { pgHistory } from '../../outbox/postgres/pg-pairing.js';
import { newerEvent, type AggregateRow, type ObservedEvent, type PageReader, type PrunedAggregate, type ProducerSnapshot, type StoreSnapshot, type VerifyReads } from './store-snapshot.js';

const ROW_COLUMNS = 'id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at';
const NEWER_ROWS = `SELECT ${ROW_COLUMNS} FROM outbox WHERE id > $1 ORDER BY id`;

/** A cursor of the snapshot's transaction, FETCHed a page at a time. */
function cursorReader<R extends object, T>(client: PoolClient, name: string, map: (row: R) => T): PageReader<T> {
  let done = false;
  return {
    async next(limit) {
      if (done) return [];
      const { rows } = await client.query<R>(`FETCH FORWARD ${Math.max(1, Math.floor(limit))} FROM ${name}`);
      if (rows.length < limit) done = true;
      return rows.map(map);
    },
  };
}

/**
 * S1 on PostgreSQL: one REPEATABLE READ, READ ONLY transaction on a client of its own, held until
 * `close`: every statement in it sees the same snapshot, the one SQLite's read transaction gives, so
 * a row pushed and marked PUBLISHED after it began is not in it, and the order of verify's reads
 * (`observe`) holds. The rows that grow with history are read through cursors, a page at a time,
 * ordered by aggregate with COLLATE "C" (byte order, as SQLite's). The check set's own read (its
 * `snapshot.postgres`, e.g. the lab's orders) runs inside it too.
 */
async function pgSnapshot(pool: Pool, horizonOrNone: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): Promise<StoreSnapshot> {
  const client = await pool.connect();
  let broken = false;
  let open = true;
  const end = async (statement: 'COMMIT' | 'ROLLBACK') => {
    if (!open) return;
    open = false;
    try {
      await client.query(statement);
    } catch (error) {
      broken = true;
      if (statement === 'COMMIT') throw error;
    } finally {
      client.release(broken);
    }
  };
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const maxId = Number((await client.query<{ m: string | null }>('SELECT MAX(id) AS m FROM outbox')).rows[0].m ?? 0);
    const horizon = horizonOrNone ?? maxId;
    const count = async (sql: string) => Number((await client.query<{ n: string }>(sql, [horizon])).rows[0].n);
    const pruned = Number((await client.query<{ n: string }>('SELECT COALESCE(SUM(events), 0) AS n FROM outbox_pruned')).rows[0].n);
    const pending = await count("SELECT COUNT(*) AS n FROM outbox WHERE status = 'PENDING' AND id <= $1");
    const pendingExamples = (await client.query<{ id: string }>(`SELECT id FROM outbox WHERE status = 'PENDING' AND id <= $1 ORDER BY id LIMIT ${EXAMPLES}`, [horizon])).rows.map((r) => Number(r.id));
    const pendingNewer = await count("SELECT COUNT(*) AS n FROM outbox WHERE status = 'PENDING' AND id > $1");
    const newerInSnapshot = (await client.query<PgOutboxRow>(NEWER_ROWS, [horizon])).rows.map((row) => newerEvent(fromPgRow(row)));
    let producerSnapshot: ProducerSnapshot = { value: undefined };
    const checkSetRead = checkSet?.snapshot?.postgres;
    if (checkSetRead !== undefined) {
      // In a savepoint: a read that fails leaves the transaction usable for the pages read after it.
      await client.query('SAVEPOINT verify_check_set');
      try {
        producerSnapshot = { value: await checkSetRead(client) };
        await client.query('RELEASE SAVEPOINT verify_check_set');
      } catch (error) {
        producerSnapshot = { error };
        await client.query('ROLLBACK TO SAVEPOINT verify_check_set');
      }
    }
    // The horizon is a number read above: written into the cursor's statement (DECLARE takes no parameters).
    await client.query(
      `DECLARE verify_events NO SCROLL CURSOR FOR SELECT id, event_id, aggregate_id, seq, status, created_at FROM outbox WHERE id <= ${Math.floor(horizon)} ORDER BY aggregate_id COLLATE "C", seq`,
    );
    await client.query('DECLARE verify_aggregates NO SCROLL CURSOR FOR SELECT aggregate_id AS key, last_seq, last_at FROM outbox_aggregates ORDER BY aggregate_id COLLATE "C"');
    let prunedCursors = 0;
    const prunedReader = (): PageReader<PrunedAggregate> => {
      const name = `verify_pruned_${(prunedCursors += 1)}`;
      const reader = cursorReader(client, name, (p: { key: string; through_seq: string; events: string }) => ({ key: p.key, throughSeq: Number(p.through_seq), events: Number(p.events) }));
      let declared: Promise<unknown> | undefined;
      return {
        next: async (limit) => {
          declared ??= client.query(`DECLARE ${name} NO SCROLL CURSOR FOR SELECT aggregate_id AS key, through_seq, events FROM outbox_pruned ORDER BY aggregate_id COLLATE "C"`);
          await declared;
          return reader.next(limit);
        },
      };
    };
    type EventRow = { id: string; event_id: string; aggregate_id: string; seq: string; status: string; created_at: string };
    return {
      horizon,
      maxId,
      pruned,
      pending,
      pendingExamples,
      pendingNewer,
      newerInSnapshot,
      producerSnapshot,
      events: cursorReader(client, 'verify_events', (e: EventRow): ObservedEvent => ({ ...e, id: Number(e.id), seq: Number(e.seq), created_at: Number(e.created_at) })),
      aggregates: cursorReader(client, 'verify_aggregates', (a: { key: string; last_seq: string; last_at: string }): AggregateRow => ({
        key: a.key,
        lastSeq: Number(a.last_seq),
        lastAt: Number(a.last_at),
      })),
      prunedRows: prunedReader(),
      prunedAgain: prunedReader,
      known: async (keys) =>
        new Set(
          (
            await client.query<{ k: string }>(
              `SELECT k FROM unnest($1::text[]) AS k WHERE EXISTS (SELECT 1 FROM outbox_aggregates WHERE aggregate_id = k)
                  OR EXISTS (SELECT 1 FROM outbox_pruned WHERE aggregate_id = k)
                  OR EXISTS (SELECT 1 FROM outbox WHERE aggregate_id = k AND id <= $2)`,
              [keys, horizon],
            )
          ).rows.map((r) => r.k),
        ),
      close: () => end('COMMIT'),
    };
  } catch (error) {
    broken = true;
    await end('ROLLBACK');
    throw error;
  }
}

/** verify's reads of the PostgreSQL store; S1 is `pgSnapshot`. */
export function pgVerifyReads(pool: Pool): VerifyReads {
  return {
    snapshot: (horizon, checkSet) => pgSnapshot(pool, horizon, checkSet),
    newerThan: async (id) => (await pool.query<PgOutboxRow>(NEWER_ROWS, [id])).rows.map((row) => newerEvent(fromPgRow(row))),
    pendingOf: async (eventIds) =>
      new Set((await pool.query<{ event_id: string }>("SELECT event_id FROM outbox WHERE status = 'PENDING' AND event_id = ANY($1)", [eventIds])).rows.map((r) => r.event_id)),
    publishedRowsOf: async (eventIds) =>
      (await pool.query<PgOutboxRow>(`SELECT ${ROW_COLUMNS} FROM outbox WHERE status = 'PUBLISHED' AND event_id = ANY($1)`, [eventIds])).rows.map(fromPgRow),
    heldOf: async (eventIds) => new Set((await pool.query<{ event_id: string }>('SELECT event_id FROM outbox WHERE event_id = ANY($1)', [eventIds])).rows.map((r) => r.event_id)),
    storeId: () => pgStoreIdOf(pool),
    hasPublished: () => pgHasPublished(pool),
    prunedAggregates: async (limit) =>
      (await pool.query<{ aggregate_id: string; through_seq: string }>('SELECT aggregate_id, through_seq FROM outbox_pruned ORDER BY aggregate_id LIMIT $1', [limit])).rows.map(
        (p) => `${p.aggregate_id} seq 1-${p.through_seq}`,
      ),
    producer: { store: 'postgres', producer: pool },
    history: pgHistory(pool),
  };
}
