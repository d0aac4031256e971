import type { Pool } from 'pg';
import type { Candidate, PruneRows } from './prune.js';
import { pgHistory } from '../../outbox/postgres/pg-pairing.js';

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
 * lock). The delete and its record are one statement: they see the same rows.
 */
export function pgPruneRows(pool: Pool): PruneRows {
  return {
    readBatch: async (after, limit) =>
      (
        await pool.query<PgCandidate>('SELECT id, event_id, aggregate_id, seq, event_type, status, created_at FROM outbox WHERE id > $1 ORDER BY id LIMIT $2', [after, limit])
      ).rows.map((row): Candidate => ({ ...row, id: Number(row.id), seq: Number(row.seq), created_at: Number(row.created_at) })),
    deleteRange: async (after, through, ids) =>
      Number(
        (
          await pool.query<{ n: string }>(
            `WITH gone AS (DELETE FROM outbox WHERE id > $1 AND id <= $2 AND id = ANY($3::bigint[]) AND status = 'PUBLISHED' RETURNING aggregate_id, seq),
                  recorded AS (
                    INSERT INTO outbox_pruned (aggregate_id, through_seq, events)
                      SELECT aggregate_id, MAX(seq), COUNT(*) FROM gone GROUP BY aggregate_id
                    ON CONFLICT (aggregate_id) DO UPDATE
                      SET through_seq = GREATEST(outbox_pruned.through_seq, excluded.through_seq), events = outbox_pruned.events + excluded.events)
             SELECT COUNT(*) AS n FROM gone`,
            [after, through, ids],
          )
        ).rows[0].n,
      ),
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
