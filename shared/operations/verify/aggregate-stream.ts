import type { AggregateRow, ObservedEvent, PageReader, PrunedAggregate, StoreSnapshot } from './store-snapshot.js';

/**
 * Aggregate keys in byte order of their UTF-8 (SQLite's BINARY, PostgreSQL's COLLATE "C"), which
 * is code point order: UTF-16's differs only where a surrogate meets U+E000-U+FFFF.
 */
export function compareKeys(a: string, b: string): number {
  if (a === b) return 0;
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i += 1) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      x = x <= 0xdfff ? x + 0x2000 : x - 0x800;
      y = y <= 0xdfff ? y + 0x2000 : y - 0x800;
    }
    return x - y;
  }
  return a.length - b.length;
}

/** What the store holds of one aggregate, or of a part of its events when they span chunks. */
export interface AggregateSlice {
  key: string;
  /** The aggregate's first slice (its rows below are on it only). */
  first: boolean;
  /**
   * Its outbox_aggregates row, its last seq cut at the horizon (less the events beyond it); none
   * without a row, or when every event of it is beyond the horizon (then not judged as an aggregate).
   */
  row?: AggregateRow;
  /** Its outbox_pruned row. */
  pruned?: PrunedAggregate;
  /** Its events up to the horizon (of this slice), in seq order. */
  events: ObservedEvent[];
}

/** A page reader with a look at its next row's key. */
class Peekable<T> {
  private rows: T[] = [];
  private at = 0;
  private done = false;

  constructor(
    private readonly reader: PageReader<T>,
    private readonly page: number,
    private readonly keyOf: (row: T) => string,
  ) {}

  async peekKey(): Promise<string | undefined> {
    if (this.at >= this.rows.length && !this.done) {
      this.rows = await this.reader.next(this.page);
      this.at = 0;
      if (this.rows.length === 0) this.done = true;
    }
    return this.at < this.rows.length ? this.keyOf(this.rows[this.at]) : undefined;
  }

  take(): T {
    return this.rows[this.at++];
  }
}

/**
 * The snapshot's aggregates in key order, in chunks of about `size` events and aggregates: each
 * aggregate's rows (outbox_aggregates, outbox_pruned) and events merged from their three ordered
 * readers, so that no more than a chunk (and a page of each reader) is in memory. An aggregate with
 * more events than a chunk holds goes on in the next one (`first` false).
 */
export async function* aggregateChunks(snapshot: StoreSnapshot, newerPerAggregate: Map<string, number>, size: number): AsyncGenerator<AggregateSlice[]> {
  const events = new Peekable(snapshot.events, size, (e) => e.aggregate_id);
  const rows = new Peekable(snapshot.aggregates, size, (a) => a.key);
  const pruned = new Peekable(snapshot.prunedRows, size, (p) => p.key);
  let chunk: AggregateSlice[] = [];
  let weight = 0;
  for (;;) {
    const heads = [await events.peekKey(), await rows.peekKey(), await pruned.peekKey()].filter((k): k is string => k !== undefined);
    if (heads.length === 0) break;
    const key = heads.reduce((min, k) => (compareKeys(k, min) < 0 ? k : min));
    const row = (await rows.peekKey()) === key ? rows.take() : undefined;
    const prunedRow = (await pruned.peekKey()) === key ? pruned.take() : undefined;
    let slice: AggregateSlice = { key, first: true, row: cutAtHorizon(row, newerPerAggregate.get(key) ?? 0), pruned: prunedRow, events: [] };
    chunk.push(slice);
    weight += 1;
    while ((await events.peekKey()) === key) {
      if (weight >= size) {
        yield chunk;
        slice = { key, first: false, events: [] };
        chunk = [slice];
        weight = 1;
      }
      slice.events.push(events.take());
      weight += 1;
    }
    if (weight >= size) {
      yield chunk;
      chunk = [];
      weight = 0;
    }
  }
  if (chunk.length > 0) yield chunk;
}

/** An outbox_aggregates row as of the horizon: its last seq less its `newer` events beyond it; none when all are. */
function cutAtHorizon(row: AggregateRow | undefined, newer: number): AggregateRow | undefined {
  if (row === undefined) return undefined;
  const lastSeq = row.lastSeq - newer;
  return lastSeq > 0 || newer === 0 ? { key: row.key, lastSeq, lastAt: row.lastAt } : undefined;
}
