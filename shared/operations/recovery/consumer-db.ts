import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import { keys } from '../../outbox/redis/keys.js';
import { queueGuardChange, readGuards } from '../../outbox/redis/guards.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { Db } from '../../outbox/store/open-database.js';
import type { RecoveryStore } from './repair.js';

/**
 * `outbox verify --repair --consumer-db <file>`: rebuilds a database-mode consumer's own database
 * that was lost (deleted, so created here empty) or replaced (an older copy, an empty file) from
 * the store. What the consumer must see to apply an event again into that database, per the
 * claim (claim-event-11.lua) and completion (complete-event-11.lua) of database mode: no processed
 * entry, no dedupe marker, and its aggregate's applied seq (seq guard) below it, with every seq
 * between the guard and it delivered again, in order. So for each aggregate whose events Redis
 * records applied (processed entry, or seq at or below its guard) while the inbox lacks them:
 *
 * - `start` is the seq of the first such event (never at or below the aggregate's pruned seq);
 * - in one MULTI: its guard is lowered to start - 1, and the events from `start` on that Redis
 *   records applied, with the inbox rows too, lose their processed entry, apply count and failed
 *   attempts (the effect those counted went with the database); every event from `start` on, the
 *   ones still queued or in flight too, loses its dedupe marker (a claim taken by a consumer of the
 *   lost file cannot complete past the lowered guard: complete-event leaves it in its list);
 * - then those events are republished (rows set back to PENDING, relayed in id order). The
 *   consumer claims them in seq order; an event with its inbox row is completed without running
 *   its handler again (the inbox's primary key), one without it is applied: apply count 1 each.
 *
 * Interrupted after the MULTI and before the republish, the forgotten events are lost in verify's
 * sense (never applied, nowhere in Redis) and the next `verify --repair` republishes them; run
 * twice, the second run finds what was applied again in the inbox and plans only what is left.
 * Events the inbox lacks that the store pruned cannot be delivered again: they are counted and
 * named, never forgotten (their processed entries stay, so verify keeps failing on them).
 * Stop the consumers first: a running one still holds the lost file and writes nothing more.
 */

/** An outbox row as the rebuild reads it. */
export interface StoreEvent {
  event_id: string;
  aggregate_id: string;
  seq: number;
}

/** What the rebuild reads of the outbox store (app.db or PostgreSQL). */
export interface ConsumerDbStore {
  /** Up to `limit` events after (`aggregate`, `seq`) in (aggregate_id, seq) order; from the start when `after` is undefined. */
  eventsAfter(after: { aggregate: string; seq: number } | undefined, limit: number): Promise<StoreEvent[]>;
  /** outbox_pruned: each aggregate's pruned seq and how many of its events prune deleted. */
  pruned(): Promise<{ aggregate_id: string; through_seq: number; events: number }[]>;
}

export function sqliteConsumerDbStore(db: Db): ConsumerDbStore {
  const first = db.prepare<[number], StoreEvent>('SELECT event_id, aggregate_id, seq FROM outbox ORDER BY aggregate_id, seq LIMIT ?');
  const next = db.prepare<[string, number, number], StoreEvent>('SELECT event_id, aggregate_id, seq FROM outbox WHERE (aggregate_id, seq) > (?, ?) ORDER BY aggregate_id, seq LIMIT ?');
  return {
    eventsAfter: async (after, limit) => (after === undefined ? first.all(limit) : next.all(after.aggregate, after.seq, limit)),
    pruned: async () => db.prepare<[], { aggregate_id: string; through_seq: number; events: number }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned').all(),
  };
}

export function pgConsumerDbStore(pool: Pool): ConsumerDbStore {
  const rows = (result: { rows: { event_id: string; aggregate_id: string; seq: string | number }[] }) =>
    result.rows.map((row) => ({ event_id: row.event_id, aggregate_id: row.aggregate_id, seq: Number(row.seq) }));
  return {
    eventsAfter: async (after, limit) =>
      rows(
        after === undefined
          ? await pool.query('SELECT event_id, aggregate_id, seq FROM outbox ORDER BY aggregate_id, seq LIMIT $1', [limit])
          : await pool.query('SELECT event_id, aggregate_id, seq FROM outbox WHERE (aggregate_id, seq) > ($1, $2) ORDER BY aggregate_id, seq LIMIT $3', [after.aggregate, after.seq, limit]),
      ),
    pruned: async () =>
      (await pool.query<{ aggregate_id: string; through_seq: string; events: string }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned')).rows.map((row) => ({
        aggregate_id: row.aggregate_id,
        through_seq: Number(row.through_seq),
        events: Number(row.events),
      })),
  };
}

// The seq guards, read and lowered here only (their layout is guards.ts's).
async function readAppliedSeqs(redis: Redis, aggregates: string[]): Promise<number[]> {
  if (aggregates.length === 0) return [];
  return (await readGuards(redis, aggregates)).map((value) => Number(value ?? 0) || 0);
}
const lowerAppliedSeq = (multi: ReturnType<Redis['multi']>, aggregate: string, seq: number) => queueGuardChange(multi, aggregate, seq);

/** One aggregate to apply again from `start`. */
export interface AggregateRedo {
  aggregate: string;
  /** Its guard when planned, and what it is lowered to (start - 1). */
  appliedSeq: number;
  start: number;
  /** Events from `start` on that Redis records applied, or whose inbox row is there: forgotten and republished. */
  redo: string[];
  /** Events from `start` on still queued or in flight: their dedupe markers go. */
  pending: string[];
}

export interface ConsumerDbPlan {
  aggregates: AggregateRedo[];
  /** Events republished (sum of `redo`), and of them the ones whose inbox row is missing. */
  events: number;
  lacking: number;
  /** The first lacking events, as lines. */
  firstLacking: string[];
  /** Events the inbox lacks that the store pruned: their effects cannot be rebuilt. */
  unrecoverable: { events: number; examples: string[] };
}

const PAGE = 5000;
const SHOWN = 5;

/** Every field of a hash, by HSCAN, keeping those `keep` accepts. */
async function hashFields(redis: Redis, key: string, keep: (field: string) => boolean): Promise<Set<string>> {
  const fields = new Set<string>();
  let cursor = '0';
  do {
    const [next, entries] = await redis.hscan(key, cursor, 'COUNT', 1000);
    for (let i = 0; i < entries.length; i += 2) if (keep(entries[i])) fields.add(entries[i]);
    cursor = next;
  } while (cursor !== '0');
  return fields;
}

/** What the rebuild would do: reads the inbox, Redis's processed entries and guards, and the store's events. */
export async function planConsumerDbRebuild(consumerDb: Db, redis: Redis | Partitions, store: ConsumerDbStore): Promise<ConsumerDbPlan> {
  const partitions = partitionsOf(redis);
  const inbox = new Set(consumerDb.prepare<[], string>('SELECT event_id FROM outbox_inbox').pluck().all());
  // Processed events without an inbox row (verify's "processed events without an inbox row").
  const processedLacking = new Set<string>();
  for (const client of partitions.clients) for (const id of await hashFields(client, keys.processed, (id) => !inbox.has(id))) processedLacking.add(id);
  const prunedRows = await store.pruned();
  const prunedThrough = new Map(prunedRows.map((row) => [row.aggregate_id, row.through_seq]));

  const plan: ConsumerDbPlan = { aggregates: [], events: 0, lacking: 0, firstLacking: [], unrecoverable: { events: 0, examples: [] } };
  const held = new Set<string>();
  const judge = async (groups: StoreEvent[][]) => {
    const byPartition = new Map<number, StoreEvent[][]>();
    for (const group of groups) {
      const index = partitions.indexOf(group[0].aggregate_id);
      byPartition.set(index, [...(byPartition.get(index) ?? []), group]);
    }
    for (const [index, mine] of byPartition) {
      const guards = await readAppliedSeqs(partitions.clients[index], mine.map((group) => group[0].aggregate_id));
      mine.forEach((events, i) => {
        const aggregate = events[0].aggregate_id;
        const guard = guards[i];
        const lacks = (e: StoreEvent) => !inbox.has(e.event_id) && (processedLacking.has(e.event_id) || e.seq <= guard);
        const firstLacking = events.find(lacks);
        if (!firstLacking) return;
        // From the first lacking event, or from the guard's next seq if the guard is behind it
        // (every seq from the new guard on must be delivered again); never into the pruned seqs.
        const start = Math.max((prunedThrough.get(aggregate) ?? 0) + 1, Math.min(firstLacking.seq, guard + 1));
        const redo: string[] = [];
        const pending: string[] = [];
        for (const e of events) {
          if (e.seq < start) continue;
          if (inbox.has(e.event_id) || lacks(e)) redo.push(e.event_id);
          else pending.push(e.event_id);
          if (lacks(e)) {
            plan.lacking += 1;
            if (plan.firstLacking.length < SHOWN) plan.firstLacking.push(`${e.event_id} (${aggregate} seq ${e.seq})`);
          }
        }
        plan.aggregates.push({ aggregate, appliedSeq: guard, start, redo, pending });
        plan.events += redo.length;
      });
    }
  };

  // The store's events, whole aggregates at a time, in (aggregate, seq) order.
  let after: { aggregate: string; seq: number } | undefined;
  let carried: StoreEvent[] = [];
  for (;;) {
    const page = await store.eventsAfter(after, PAGE);
    for (const e of page) if (processedLacking.has(e.event_id)) held.add(e.event_id);
    const rows = [...carried, ...page];
    if (page.length === PAGE) {
      after = { aggregate: page[page.length - 1].aggregate_id, seq: page[page.length - 1].seq };
      const last = rows[rows.length - 1].aggregate_id;
      carried = rows.filter((e) => e.aggregate_id === last);
      await judge(groupsOf(rows.filter((e) => e.aggregate_id !== last)));
      continue;
    }
    await judge(groupsOf(rows));
    break;
  }

  // Pruned events without their inbox row: counted as verify counts them (prunedWithInboxRow), and
  // named by their processed entries where Redis still has them.
  if (prunedRows.length > 0) {
    const inInbox = new Map<string, number>();
    for (const row of consumerDb.prepare<[], { aggregate_id: string; seq: number }>('SELECT aggregate_id, seq FROM outbox_inbox').iterate()) {
      const through = prunedThrough.get(row.aggregate_id);
      if (through !== undefined && row.seq <= through) inInbox.set(row.aggregate_id, (inInbox.get(row.aggregate_id) ?? 0) + 1);
    }
    const short = prunedRows.map((row) => ({ ...row, short: row.events - Math.min(row.events, inInbox.get(row.aggregate_id) ?? 0) })).filter((row) => row.short > 0);
    plan.unrecoverable.events = short.reduce((n, row) => n + row.short, 0);
    if (plan.unrecoverable.events > 0) {
      const named: string[] = [];
      let looked = 0;
      for (const id of processedLacking) {
        if (named.length >= SHOWN || looked >= 10 * SHOWN) break;
        if (held.has(id)) continue;
        looked += 1;
        for (const client of partitions.clients) {
          const value = await client.hget(keys.processed, id);
          if (value === null) continue;
          const { aggregateId, aggregate, seq } = parseProcessed(value);
          const key = aggregateId ?? aggregate;
          if (key !== undefined && seq !== undefined && seq <= (prunedThrough.get(key) ?? 0)) named.push(`${id} (${key} seq ${seq})`);
          break;
        }
      }
      plan.unrecoverable.examples = [
        ...named,
        ...short.slice(0, SHOWN).map((row) => `${row.aggregate_id}: ${row.short} of its ${row.events} pruned event(s) (seq ${row.through_seq - row.events + 1}-${row.through_seq}) without an inbox row`),
      ];
    }
  }
  return plan;
}

function groupsOf(rows: StoreEvent[]): StoreEvent[][] {
  const groups: StoreEvent[][] = [];
  for (const row of rows) {
    const last = groups[groups.length - 1];
    if (last && last[0].aggregate_id === row.aggregate_id) last.push(row);
    else groups.push([row]);
  }
  return groups;
}

function parseProcessed(value: string): { aggregateId?: string; aggregate?: string; seq?: number } {
  try {
    const parsed = JSON.parse(value) as { aggregateId?: unknown; aggregate?: unknown; seq?: unknown };
    return {
      aggregateId: typeof parsed.aggregateId === 'string' ? parsed.aggregateId : undefined,
      aggregate: typeof parsed.aggregate === 'string' ? parsed.aggregate : undefined,
      seq: typeof parsed.seq === 'number' ? parsed.seq : undefined,
    };
  } catch {
    return {};
  }
}

/** Ids per MULTI: each MULTI holds whole aggregates. */
const PER_MULTI = 2000;

/**
 * Forgets in Redis what the plan applies again (one MULTI per few aggregates, each aggregate whole
 * in one), then republishes those events through the store. See the header for why each step.
 */
export async function rebuildConsumerDb(redis: Redis | Partitions, recovery: RecoveryStore, plan: ConsumerDbPlan): Promise<{ aggregates: number; forgotten: number; republished: number }> {
  const partitions = partitionsOf(redis);
  const byPartition = new Map<number, AggregateRedo[]>();
  for (const a of plan.aggregates) {
    const index = partitions.indexOf(a.aggregate);
    byPartition.set(index, [...(byPartition.get(index) ?? []), a]);
  }
  for (const [index, aggregates] of byPartition) {
    const client = partitions.clients[index];
    for (let i = 0; i < aggregates.length; ) {
      const multi = client.multi();
      for (let ids = 0; i < aggregates.length && ids < PER_MULTI; i += 1) {
        const a = aggregates[i];
        if (a.start - 1 < a.appliedSeq) lowerAppliedSeq(multi, a.aggregate, a.start - 1);
        if (a.redo.length > 0) multi.hdel(keys.processed, ...a.redo).hdel(keys.applyCount, ...a.redo).hdel(keys.attempts, ...a.redo);
        const markers = [...a.redo, ...a.pending].map((id) => keys.seen(id));
        if (markers.length > 0) multi.del(...markers);
        ids += a.redo.length + a.pending.length;
      }
      const replies = (await multi.exec()) ?? [];
      const failed = replies.find(([error]) => error);
      if (failed) throw failed[0]!;
    }
  }
  const ids = plan.aggregates.flatMap((a) => a.redo);
  const { reset } = ids.length === 0 ? { reset: 0 } : await recovery.republish(redis, ids);
  return { aggregates: plan.aggregates.length, forgotten: ids.length, republished: reset };
}
