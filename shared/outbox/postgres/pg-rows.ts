/** An outbox row as node-postgres returns it: its bigints as text. */
export interface PgOutboxRow {
  id: string;
  event_id: string;
  aggregate_id: string;
  seq: string;
  event_type: string;
  payload: string;
  created_at: string;
  prev_created_at: string;
}

type Numbered<R> = Omit<R, 'id' | 'seq' | 'created_at' | 'prev_created_at'> & { id: number; seq: number; created_at: number } & (R extends {
  prev_created_at: string;
}
  ? { prev_created_at: number }
  : unknown);

/** A row's id, seq and created_at (bigints, as text from node-postgres) as numbers: the shape app.db's rows have. */
export function fromPgRow<R extends { id: string; seq: string; created_at: string; prev_created_at?: string }>(row: R): Numbered<R> {
  const numbered = { ...row, id: Number(row.id), seq: Number(row.seq), created_at: Number(row.created_at) };
  if (row.prev_created_at !== undefined) Object.assign(numbered, { prev_created_at: Number(row.prev_created_at) });
  return numbered as Numbered<R>;
}
