import type { Redis } from 'ioredis';
import { keys } from '../../outbox/redis/keys.js';
import { readGuards } from '../../outbox/redis/guards.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { Db } from '../../outbox/store/open-database.js';
import type { InvariantCheck } from '../../outbox/verify/verify-checks.js';
import type { VerifyReads } from './store-snapshot.js';
import { Tally } from './findings.js';

/**
 * Of inbox rows without a processed entry, those whose aggregate's applied seq (read after the
 * inbox) has reached their seq: completed, their record swept by the dedupe window since. Only the
 * completion raises the applied seq in database mode, in the step that writes the processed entry.
 */
async function completedBySeq(partitions: Partitions, rows: InboxRow[]): Promise<Set<string>> {
  const completed = new Set<string>();
  for (const [index, group] of byPartition(partitions, rows, (row) => row.aggregate_id)) {
    for (let first = 0; first < group.length; first += HELD_CHUNK) {
      const chunk = group.slice(first, first + HELD_CHUNK);
      const seqs = await readGuards(partitions.clients[index], chunk.map((row) => row.aggregate_id));
      chunk.forEach((row, i) => {
        if (row.seq <= Number(seqs[i] ?? 0)) completed.add(row.event_id);
      });
    }
  }
  return completed;
}

/** Event ids asked of the store per query. */
const HELD_CHUNK = 1000;

/** What the inbox checks ask of the outbox store (verify's reads of app.db or PostgreSQL). */
export type InboxStoreReads = Pick<VerifyReads, 'heldOf' | 'history'>;

interface InboxRow {
  event_id: string;
  aggregate_id: string;
  seq: number;
}

/**
 * Database mode's invariants, between Redis, the consumer's own database and the store:
 * - every event Redis records as processed has exactly one inbox row (its primary key makes it at
 *   most one), so its effect is in the database. An inbox row whose event is not processed yet is in
 *   flight: its process died after the commit, and the next attempt (after the lease) completes it.
 * - every inbox row is an event the store holds, or one it pruned (`outbox_pruned` through its seq).
 *   Any other is the effect of a history the store lost (app.db restored from an older backup, a
 *   dump restored, while the consumer database kept what it applied): `verify --repair` rebuilds
 *   Redis from the store, but effects in the consumer database are the handlers' own, which nothing
 *   can take back one event at a time.
 */
export async function inboxChecks(consumerDb: Db, redis: Redis | Partitions, store: InboxStoreReads): Promise<InvariantCheck[]> {
  const partitions = partitionsOf(redis);
  const inInbox = consumerDb.prepare<[string], string>('SELECT event_id FROM outbox_inbox WHERE event_id IN (SELECT value FROM json_each(?))').pluck();
  // Each chunk of processed entries first, then their inbox rows: an event completed in between then
  // shows as in flight, never as missing (its inbox row was committed before Redis recorded it).
  const missing = new Tally<string>();
  for (const client of partitions.clients) {
    let cursor = '0';
    do {
      const [next, entries] = await client.hscan(keys.processed, cursor, 'COUNT', HELD_CHUNK);
      cursor = next;
      const ids = entries.filter((_, i) => i % 2 === 0);
      if (ids.length === 0) continue;
      const found = new Set(inInbox.all(JSON.stringify(ids)));
      for (const id of ids) if (!found.has(id)) missing.add(id);
    } while (cursor !== '0');
  }
  // The inbox a page at a time; each page's events looked up in the store after it (an inbox row's
  // event was committed in the store before the consumer had it). What prune deleted is read after a
  // row was looked for: a prune records what it deletes in the same transaction, so a row gone before
  // its look-up is covered by then.
  const page = consumerDb.prepare<[number], InboxRow & { rowid: number }>('SELECT rowid, event_id, aggregate_id, seq FROM outbox_inbox WHERE rowid > ? ORDER BY rowid LIMIT 1000');
  const foreign = new Tally<InboxRow>();
  let rowsSeen = 0;
  let pendingCount = 0;
  for (let rows = page.all(0); rows.length > 0; rows = page.all(rows[rows.length - 1].rowid)) {
    rowsSeen += rows.length;
    const held = await store.heldOf(rows.map((row) => row.event_id));
    const prunedThrough = new Map<string, number>();
    for (const row of rows) {
      if (held.has(row.event_id)) continue;
      if (!prunedThrough.has(row.aggregate_id)) prunedThrough.set(row.aggregate_id, await store.history.prunedThrough(row.aggregate_id));
      if (row.seq > prunedThrough.get(row.aggregate_id)!) foreign.add(row);
    }
    // Completion pending: only events the store holds, with no processed entry in any partition. The
    // others are pruned (applied, their rows gone, their record maybe lost with Redis, as in a
    // rebuild) or of a lost history (above).
    const heldRows = rows.filter((row) => held.has(row.event_id));
    const processed = await Promise.all(partitions.clients.map((client) => (heldRows.length === 0 ? [] : client.hmget(keys.processed, ...heldRows.map((row) => row.event_id)))));
    const unrecorded = heldRows.filter((_, i) => processed.every((values) => values[i] === null));
    const completed = await completedBySeq(partitions, unrecorded);
    pendingCount += unrecorded.filter((row) => !completed.has(row.event_id)).length;
  }
  return [
    {
      name: 'processed events without an inbox row (effect missing from the consumer database)',
      expected: '0',
      actual: String(missing.count),
      status: missing.count === 0 ? 'ok' : 'FAIL',
      examples: missing.count === 0 ? undefined : missing.samples,
    },
    {
      name: 'inbox rows of events the store does not hold (effects of a lost history)',
      expected: '0',
      actual: String(foreign.count),
      status: foreign.count === 0 ? 'ok' : 'FAIL',
      examples:
        foreign.count === 0
          ? undefined
          : [
              ...foreign.samples.map((row) => `${row.event_id} (${row.aggregate_id} seq ${row.seq})`),
              'the consumer database holds effects of events the store no longer holds: after the store was restored from an older backup, stop the apps, restore it from a backup taken with the store\'s, then run outbox verify --repair; after outbox init --force, start it over too',
            ],
    },
    { name: 'inbox rows / of them committed, completion pending', expected: '-', actual: `${rowsSeen} / ${pendingCount}`, status: 'info' },
  ];
}
