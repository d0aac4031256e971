import type { Pool } from 'pg';
import type { VerifyCheckSet } from '../../outbox/verify/verify-checks.js';
import { pgHasPublished, pgStoreIdOf } from '../../outbox/postgres/pg-store-meta.js';
import { fromPgRow, type PgOutboxRow } from '../../outbox/postgres/pg-rows.js';
import { pgHistory } from '../../outbox/postgres/pg-pairing.js';
import { newerEvent, producerRead, type ObservedEvent, type ProducerRead, type ProducerSnapshot, type VerifyReads } from './observe.js';


const NEWER_ROWS = 'SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE id > $1 ORDER BY id';

/**
 * verify's reads of the PostgreSQL store. S1 is one REPEATABLE READ, READ ONLY transaction: every
 * statement in it sees the same snapshot, the one SQLite's read transaction gives, so a row pushed
 * and marked PUBLISHED after it began is not in it, and the order of verify's reads (`observe`) holds.
 * The check set's own read (its `snapshot.postgres`, e.g. the lab's orders) runs inside it too.
 */
export function pgVerifyReads(pool: Pool): VerifyReads {
  async function snapshot(horizonOrNone: number | undefined, checkSet: VerifyCheckSet<unknown> | undefined): Promise<ProducerRead> {
    const client = await pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const maxId = Number((await client.query<{ m: string | null }>('SELECT MAX(id) AS m FROM outbox')).rows[0].m ?? 0);
      const horizon = horizonOrNone ?? maxId;
      const pruned = Number((await client.query<{ n: string }>('SELECT COALESCE(SUM(events), 0) AS n FROM outbox_pruned')).rows[0].n);
      const prunedThrough = (await client.query<{ key: string; through_seq: string; events: string }>('SELECT aggregate_id AS key, through_seq, events FROM outbox_pruned')).rows.map(
        (p) => ({ key: p.key, throughSeq: Number(p.through_seq), events: Number(p.events) }),
      );
      const pendingRows = (await client.query<{ id: string }>("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id")).rows.map((r) => Number(r.id));
      // Ordered by aggregate and seq, for the out-of-order check; COLLATE "C" sorts as SQLite does.
      type Row = { id: string; event_id: string; aggregate_id: string; seq: string; status: string };
      const all = (await client.query<Row & { created_at: string }>(
        'SELECT id, event_id, aggregate_id, seq, status, created_at FROM outbox ORDER BY aggregate_id COLLATE "C", seq',
      )).rows.map((e): ObservedEvent => {
        return { ...e, id: Number(e.id), seq: Number(e.seq), created_at: Number(e.created_at) };
      });
      const newer = (await client.query<PgOutboxRow>(NEWER_ROWS, [horizon])).rows.map((row) => newerEvent(fromPgRow(row)));
      const lastSeqs = (
        await client.query<{ key: string; last_seq: string; last_at: string }>('SELECT aggregate_id AS key, last_seq, last_at FROM outbox_aggregates ORDER BY aggregate_id COLLATE "C"')
      ).rows.map((a) => ({ key: a.key, lastSeq: Number(a.last_seq), lastAt: Number(a.last_at) }));
      let producerSnapshot: ProducerSnapshot = { value: undefined };
      const checkSetRead = checkSet?.snapshot?.postgres;
      if (checkSetRead !== undefined) {
        try {
          producerSnapshot = { value: await checkSetRead(client) };
        } catch (error) {
          producerSnapshot = { error };
        }
      }
      await client.query('COMMIT');
      return producerRead({ horizon, maxId, pruned, prunedThrough, pendingRows, all, newer, lastSeqs, producerSnapshot });
    } catch (error) {
      broken = true;
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release(broken);
    }
  }

  return {
    snapshot,
    newerThan: async (id) => (await pool.query<PgOutboxRow>(NEWER_ROWS, [id])).rows.map((row) => newerEvent(fromPgRow(row))),
    pendingOf: async (eventIds) =>
      new Set((await pool.query<{ event_id: string }>("SELECT event_id FROM outbox WHERE status = 'PENDING' AND event_id = ANY($1)", [eventIds])).rows.map((r) => r.event_id)),
    publishedRowsOf: async (eventIds) =>
      (
        await pool.query<PgOutboxRow>(
          "SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE status = 'PUBLISHED' AND event_id = ANY($1)",
          [eventIds],
        )
      ).rows.map(fromPgRow),
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
