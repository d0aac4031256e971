import type { Db } from '../../outbox/store/open-database.js';
import { EXAMPLES } from '../../outbox/verify/verify-checks.js';
import { compareKeys } from './aggregate-stream.js';
import type { PageReader, PrunedAggregate } from './store-snapshot.js';

/** Pruned events without their inbox row (database mode): how many, and the first aggregates short of theirs. */
export interface InboxedPruned {
  missing: number;
  examples: string[];
}

const PAGE = 1000;

/**
 * Database mode: of the pruned events (each aggregate's prefix 1..throughSeq), how many have their
 * inbox row in the consumer's database, i.e. their effect; the others are `missing`. The pruned
 * aggregates (a page at a time) and the inbox (sorted by aggregate in SQLite's temp store, read row
 * by row) are merged in key order: neither is held whole.
 */
export async function prunedWithInboxRow(consumer: Db, pruned: PageReader<PrunedAggregate>): Promise<InboxedPruned> {
  const result: InboxedPruned = { missing: 0, examples: [] };
  let page = await pruned.next(PAGE);
  let at = 0;
  let inInbox = 0;
  const settle = (p: PrunedAggregate) => {
    const short = p.events - Math.min(p.events, inInbox);
    result.missing += short;
    if (short > 0 && result.examples.length < EXAMPLES) result.examples.push(`${p.key}: ${short} of its ${p.events} pruned event(s) without an inbox row`);
    inInbox = 0;
  };
  const current = async (): Promise<PrunedAggregate | undefined> => {
    if (at >= page.length) {
      page = await pruned.next(PAGE);
      at = 0;
    }
    return page[at];
  };
  if ((await current()) === undefined) return result;
  // The iterator stays open across the pruned pages' reads: nothing else runs on this connection meanwhile.
  for (const row of consumer.prepare<[], { aggregate_id: string; seq: number }>('SELECT aggregate_id, seq FROM outbox_inbox ORDER BY aggregate_id').iterate()) {
    let p = await current();
    while (p !== undefined && compareKeys(p.key, row.aggregate_id) < 0) {
      settle(p);
      at += 1;
      p = await current();
    }
    if (p === undefined) break;
    if (p.key === row.aggregate_id && row.seq <= p.throughSeq) inInbox += 1;
  }
  for (let p = await current(); p !== undefined; p = await current()) {
    settle(p);
    at += 1;
  }
  return result;
}
