import type { Redis } from 'ioredis';
import { keys } from '../../outbox/redis/keys.js';
import { readGuards } from '../../outbox/redis/guards.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { Db } from '../../outbox/store/open-database.js';
import type { InvariantCheck } from '../../outbox/verify/verify-checks.js';
import type { VerifyReads } from './observe.js';

const EXAMPLES = 5;

/** Every field of a hash, by HSCAN (no single reply of a million fields). */
async function hashFields(redis: Redis, key: string): Promise<Set<string>> {
  const fields = new Set<string>();
  let cursor = '0';
  do {
    const [next, entries] = await redis.hscan(key, cursor, 'COUNT', 1000);
    for (let i = 0; i < entries.length; i += 2) fields.add(entries[i]);
    cursor = next;
  } while (cursor !== '0');
  return fields;
}

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
  // Processed first: an event completed between the two reads then shows as in flight, never as
  // missing (its inbox row was committed before Redis recorded it). Every partition's.
  const processed = new Set((await Promise.all(partitionsOf(redis).clients.map((client) => hashFields(client, keys.processed)))).flatMap((fields) => [...fields]));
  const rows = consumerDb.prepare<[], InboxRow>('SELECT event_id, aggregate_id, seq FROM outbox_inbox').all();
  const inbox = new Set(rows.map((row) => row.event_id));
  const missing = [...processed].filter((id) => !inbox.has(id));
  // The store is read after the inbox: an inbox row's event was committed in the store before the
  // consumer had it. What prune deleted is read after every row was looked for: a prune records what
  // it deletes in the same transaction, so a row gone before its look-up is covered by then.
  const notHeld: InboxRow[] = [];
  for (let first = 0; first < rows.length; first += HELD_CHUNK) {
    const chunk = rows.slice(first, first + HELD_CHUNK);
    const held = await store.heldOf(chunk.map((row) => row.event_id));
    for (const row of chunk) if (!held.has(row.event_id)) notHeld.push(row);
  }
  const prunedThrough = new Map<string, number>();
  for (const row of notHeld) if (!prunedThrough.has(row.aggregate_id)) prunedThrough.set(row.aggregate_id, await store.history.prunedThrough(row.aggregate_id));
  const foreign = notHeld.filter((row) => row.seq > prunedThrough.get(row.aggregate_id)!);
  // Completion pending: only events the store holds. The others are pruned (applied, their rows
  // gone, their record maybe lost with Redis, as in a rebuild) or of a lost history (above).
  const notHeldIds = new Set(notHeld.map((row) => row.event_id));
  const unrecorded = rows.filter((row) => !processed.has(row.event_id) && !notHeldIds.has(row.event_id));
  const completed = await completedBySeq(partitionsOf(redis), unrecorded);
  const pending = unrecorded.filter((row) => !completed.has(row.event_id));
  return [
    {
      name: 'processed events without an inbox row (effect missing from the consumer database)',
      expected: '0',
      actual: String(missing.length),
      status: missing.length === 0 ? 'ok' : 'FAIL',
      examples: missing.length === 0 ? undefined : missing.slice(0, EXAMPLES),
    },
    {
      name: 'inbox rows of events the store does not hold (effects of a lost history)',
      expected: '0',
      actual: String(foreign.length),
      status: foreign.length === 0 ? 'ok' : 'FAIL',
      examples:
        foreign.length === 0
          ? undefined
          : [
              ...foreign.slice(0, EXAMPLES).map((row) => `${row.event_id} (${row.aggregate_id} seq ${row.seq})`),
              'the consumer database holds effects of events the store no longer holds: after the store was restored from an older backup, stop the apps, restore it from a backup taken with the store\'s, then run outbox verify --repair; after outbox init --force, start it over too',
            ],
    },
    { name: 'inbox rows / of them committed, completion pending', expected: '-', actual: `${inbox.size} / ${pending.length}`, status: 'info' },
  ];
}
