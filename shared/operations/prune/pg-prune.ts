import type { Pool } from 'pg';
import type { Candidate, PruneRows } from './prune.js';
import { pgHistory } from '../../outbox/postgres/pg-pairing.js';
import { REPLAY_LOCK } from '../../outbox/postgres/locks.js';

interface PgCandidate {
  id: string;
  event_id: string;
  aggregate_id: string;
  seq: string;
  event_type: string;
  status: string;
  created_at: string;
}

/**
 * prune's rows on PostgreSQL. A row whose producer has not committed yet is not visible: prune goes
 * past it and deletes only the rows it read and found applied (by id), never that one, although it
 * may commit, be relayed and marked PUBLISHED before the delete; each aggregate still loses a prefix
 * of its events (a later event of the same aggregate waits for that commit, on the aggregate's row
 * lock). The delete and its record are one statement, under the replay lock (SHARED).
 */
export function pgPruneRows(pool: Pool): PruneRows {
  return {
    readBatch: async (after, limit) =>
      (
        await pool.query<PgCandidate>('SELECT id, event_id, aggregate_id, seq, event_type, status, created_at FROM outbox WHERE id > $1 ORDER BY id LIMIT $2', [after, limit])
      ).rows.map((row): Candidate => ({ ...row, id: Number(row.id), seq: Number(row.seq), created_at: Number(row.created_at) })),
    deleteRange: async (after, through, ids) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        // The replay lock, SHARED (as every relay batch holds it): no replay or rebuild sets a row
        // back to PENDING until this transaction ends, and the statements below see every one that
        // committed before.
        await client.query('SELECT pg_advisory_xact_lock_shared($1)', [REPLAY_LOCK]);
        const { rows } = await client.query<{ id: string; aggregate_id: string; seq: string; status: string }>(
          'SELECT id, aggregate_id, seq, status FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id',
          [ids],
        );
        // A row replayed since prune read it stays, with every row after it (see PruneRows.deleteRange).
        const firstKept = rows.findIndex((row) => row.status !== 'PUBLISHED');
        const candidates = firstKept === -1 ? rows : rows.slice(0, firstKept);
        // So do the rows of an aggregate that holds another row at or below their seqs: each
        // aggregate loses only a prefix. (A row committed late, below a batch an earlier read went
        // past, is one: its aggregate's next event may be read, applied and old by then.)
        const going = new Map<string, { seq: number; rows: number }>();
        for (const row of candidates) {
          const aggregate = going.get(row.aggregate_id) ?? { seq: 0, rows: 0 };
          going.set(row.aggregate_id, { seq: Math.max(aggregate.seq, Number(row.seq)), rows: aggregate.rows + 1 });
        }
        const { rows: held } = await client.query<{ aggregate_id: string }>(
          `SELECT a.aggregate_id FROM unnest($1::text[], $2::bigint[], $3::int[]) AS a (aggregate_id, seq, going)
            WHERE (SELECT COUNT(*) FROM outbox p WHERE p.aggregate_id = a.aggregate_id AND p.seq <= a.seq) > a.going`,
          [[...going.keys()], [...going.values()].map((a) => a.seq), [...going.values()].map((a) => a.rows)],
        );
        const blocked = new Set(held.map((row) => row.aggregate_id));
        const deleting = candidates.filter((row) => !blocked.has(row.aggregate_id)).map((row) => row.id);
        const { rows: gone } = await client.query<{ id: string }>(
          `WITH gone AS (DELETE FROM outbox WHERE id > $1 AND id <= $2 AND id = ANY($3::bigint[]) AND status = 'PUBLISHED' RETURNING id, aggregate_id, seq),
                recorded AS (
                  INSERT INTO outbox_pruned (aggregate_id, through_seq, events)
                    SELECT aggregate_id, MAX(seq), COUNT(*) FROM gone GROUP BY aggregate_id
                  ON CONFLICT (aggregate_id) DO UPDATE
                    SET through_seq = GREATEST(outbox_pruned.through_seq, excluded.through_seq), events = outbox_pruned.events + excluded.events)
           SELECT id FROM gone ORDER BY id`,
          [after, through, deleting],
        );
        await client.query('COMMIT');
        return gone.map((row) => Number(row.id));
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    },
    countWaiting: async (fromId, cutoff) =>
      Number(
        (
          await pool.query<{ n: string }>(
            `SELECT COUNT(*) AS n FROM outbox WHERE id >= $1 AND id < COALESCE(
               (SELECT id FROM outbox WHERE id >= $1 AND (status = 'PENDING' OR created_at >= $2) ORDER BY id LIMIT 1), $3)`,
            [fromId, cutoff, Number.MAX_SAFE_INTEGER],
          )
        ).rows[0].n,
      ),
    history: pgHistory(pool),
  };
}
