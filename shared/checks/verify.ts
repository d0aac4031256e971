import type { Redis } from 'ioredis';
import type { Db } from '../db/open-database.js';
import { eventIdOf } from '../events.js';
import { keys } from '../redis/keys.js';
import { processingLists } from '../redis/processing-lists.js';
import { readEnvelope } from '../redis/envelope.js';
import { readList } from '../redis/read-list.js';
import { hasPublished } from '../db/store-meta.js';

export interface InvariantCheck {
  name: string;
  expected: string;
  actual: string;
  /** 'info' rows are shown but never fail the run. */
  status: 'ok' | 'FAIL' | 'info';
  /** A few offending ids, for the reader to look at. */
  examples?: string[];
}

const EXAMPLES = 5;
const CHUNK = 1000;

function check(name: string, expected: number, actual: number, examples: string[] = []): InvariantCheck {
  return {
    name,
    expected: String(expected),
    actual: String(actual),
    status: expected === actual ? 'ok' : 'FAIL',
    examples: expected === actual ? undefined : examples.slice(0, EXAMPLES),
  };
}

/** Looks up `fields` in a hash in chunks; resolves the values in the same order. */
async function hashValues(redis: Redis, key: string, fields: string[]): Promise<(string | null)[]> {
  const chunks: Promise<(string | null)[]>[] = [];
  for (let i = 0; i < fields.length; i += CHUNK) chunks.push(redis.hmget(key, ...fields.slice(i, i + CHUNK)));
  return (await Promise.all(chunks)).flat();
}

/** Event ids on their way in a list: queued or in a processing list (parked ones are added by the caller). */
async function inFlight(redis: Redis): Promise<{ ids: Set<string>; queued: number; processing: number }> {
  const ids = new Set<string>();
  const add = (message: string) => {
    const id = eventIdOf(message);
    if (id) ids.add(id);
  };
  let queued = 0;
  let processing = 0;
  for await (const message of readList(redis, keys.events)) {
    queued += 1;
    add(message);
  }
  for await (const list of processingLists(redis)) {
    for await (const message of readList(redis, list)) {
      processing += 1;
      add(message);
    }
  }
  return { ids, queued, processing };
}

const INTEGER = /^-?\d+$/;

/** Fields where a count belongs but Redis holds something else, and parked entries that are not JSON: what the apply script refuses to build on. */
function corruptEntries(counts: Record<string, Record<string, string>>, parked: Record<string, string>): string[] {
  const found: string[] = [];
  for (const [key, hash] of Object.entries(counts)) {
    for (const [field, value] of Object.entries(hash)) {
      if (!INTEGER.test(value)) found.push(`${key} ${field} = ${JSON.stringify(value.slice(0, 40))}`);
    }
  }
  for (const [field, value] of Object.entries(parked)) {
    if (readEnvelope(value) === undefined) found.push(`${keys.parked} ${field} is not a parked entry`);
  }
  return found;
}

/** Aggregates whose events were applied in another order than their seq (by the recorded applyOrder). */
function outOfOrder(events: { aggregate_id: number; seq: number }[], processed: (string | null)[]): string[] {
  const last = new Map<number, number>();
  const broken = new Set<number>();
  events.forEach((event, i) => {
    const value = processed[i];
    if (value === null) return;
    const order = (JSON.parse(value) as { applyOrder?: number }).applyOrder ?? 0;
    if (order <= (last.get(event.aggregate_id) ?? 0)) broken.add(event.aggregate_id);
    last.set(event.aggregate_id, order);
  });
  return [...broken].map((id) => `aggregate ${id}`);
}

/** Which events prune deleted, per aggregate: what a Redis that lost its state cannot get back. */
function prunedAggregates(db: Db): string[] {
  return db
    .prepare<[], { aggregate_id: number; through_seq: number }>(`SELECT aggregate_id, through_seq FROM outbox_pruned ORDER BY aggregate_id LIMIT ${EXAMPLES}`)
    .all()
    .map((p) => `order ${p.aggregate_id} seq 1-${p.through_seq}`);
}

export interface Ledger {
  checks: InvariantCheck[];
  /** Outbox events that were never applied and are nowhere in Redis: what `--repair` republishes. */
  lost: string[];
  figures: {
    orders: number;
    outbox: number;
    /** Events deleted by `outbox prune`. */
    pruned: number;
    processedUnique: number;
    lost: number;
    outOfOrder: number;
    /** Events whose effect was applied more than once (per-event apply counts). */
    appliedTwice: number;
    inventoryMismatches: number;
    parked: number;
    deadLettered: number;
    inFlight: number;
    /** Redis serves no store although this one published: it lost its state and was not rebuilt yet. */
    redisStateLost: boolean;
    /** Events pruned from SQLite before Redis lost its state: their effects cannot be rebuilt. */
    unrecoverable: number;
  };
}

/**
 * Reconciles SQLite (the source of truth) with what the consumer applied in Redis. Meaningful when
 * the system is quiescent: while events are still in flight, the delivery checks fail by design.
 */
export async function verifyStores(db: Db, redis: Redis): Promise<Ledger> {
  // Events deleted by `outbox prune` count as present: they were published long ago.
  const incomplete = db
    .prepare<[], { id: number }>(
      `SELECT o.id FROM orders o LEFT JOIN outbox_pruned p ON p.aggregate_id = o.id
        WHERE (SELECT COUNT(*) FROM outbox e WHERE e.aggregate_id = o.id) + COALESCE(p.events, 0) <> o.version
           OR (NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.id AND e.seq = o.version)
               AND COALESCE(p.through_seq, 0) < o.version)`,
    )
    .all();
  const pruned = db.prepare<[], { n: number }>('SELECT COALESCE(SUM(events), 0) AS n FROM outbox_pruned').get()!.n;
  const orphans = db
    .prepare<[], { event_id: string }>('SELECT event_id FROM outbox e WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = e.aggregate_id)')
    .all();
  const pending = db.prepare<[], { id: number }>("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id").all();
  // Ordered by aggregate and seq, for the out-of-order check.
  const events = db.prepare<[], { event_id: string; aggregate_id: number; seq: number }>('SELECT event_id, aggregate_id, seq FROM outbox ORDER BY aggregate_id, seq').all();
  const eventIds = events.map((e) => e.event_id);
  const orders = db.prepare<[], { id: number; version: number }>('SELECT id, version FROM orders ORDER BY id').all();
  const reservedBySku = new Map(
    db
      .prepare<[], { sku: string; qty: number }>("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku")
      .all()
      .map((row) => [row.sku, row.qty]),
  );

  // Each hash is read once: the same values serve the invariants and the corruption check.
  const [meta, processedCount, processed, applyCounts, appliedSeqs, inventory, stats, parked, dead, flight] = await Promise.all([
    redis.hgetall(keys.meta),
    redis.hlen(keys.processed),
    hashValues(redis, keys.processed, eventIds),
    redis.hgetall(keys.applyCount),
    redis.hgetall(keys.appliedSeq),
    redis.hgetall(keys.inventory),
    redis.hgetall(keys.stats),
    redis.hgetall(keys.parked),
    redis.llen(keys.deadLetter),
    inFlight(redis),
  ]);
  for (const envelope of Object.values(parked)) {
    const message = readEnvelope(envelope)?.message;
    const id = message === undefined ? undefined : eventIdOf(message);
    if (id) flight.ids.add(id);
  }
  const parkedCount = Object.keys(parked).length;
  const corrupt = corruptEntries(
    { [keys.appliedSeq]: appliedSeqs, [keys.inventory]: inventory, [keys.stats]: stats, [keys.applyCount]: applyCounts },
    parked,
  );

  const lost = eventIds.filter((id, i) => processed[i] === null && !flight.ids.has(id));
  // The per-event evidence, kept in the same step as the effect: more than 1 is a double effect.
  const appliedTwice = eventIds.flatMap((id) => (Number(applyCounts[id] ?? 0) > 1 ? [`${id} (${applyCounts[id]} times)`] : []));
  const redisStateLost = meta.store === undefined && hasPublished(db);
  const unrecoverable = Number(meta.unrecoverable ?? 0);
  const disordered = outOfOrder(events, processed);
  const seqMismatch = orders.filter((o) => Number(appliedSeqs[String(o.id)] ?? 0) !== o.version).map((o) => `order ${o.id}`);
  const skus = new Set([...reservedBySku.keys(), ...Object.keys(inventory)]);
  const inventoryMismatch = [...skus]
    .filter((sku) => Number(inventory[sku] ?? 0) !== (reservedBySku.get(sku) ?? 0))
    .map((sku) => `${sku}: reserved ${inventory[sku] ?? 0}, orders say ${reservedBySku.get(sku) ?? 0}`);

  const checks: InvariantCheck[] = [
    {
      name: 'Redis serves this store',
      expected: 'yes',
      actual: redisStateLost ? 'no: Redis lost its state' : meta.store === undefined ? 'not yet (nothing published)' : 'yes',
      status: redisStateLost ? 'FAIL' : 'ok',
      examples: redisStateLost ? ['the relay rebuilds it from SQLite on its next pass; by hand: outbox verify --repair'] : undefined,
    },
    check('pruned events Redis lost (effects cannot be rebuilt)', 0, unrecoverable, unrecoverable > 0 ? prunedAggregates(db) : []),
    check('orders with missing events', 0, incomplete.length, incomplete.map((o) => `order ${o.id}`)),
    check('events without an order', 0, orphans.length, orphans.map((e) => e.event_id)),
    check('PENDING outbox rows', 0, pending.length, pending.map((p) => `row ${p.id}`)),
    check(pruned > 0 ? 'processed_unique = outbox rows + pruned' : 'processed_unique = outbox rows', eventIds.length + pruned, processedCount),
    check('events lost (never applied, not in Redis)', 0, lost.length, lost),
    check('events applied more than once', 0, appliedTwice.length, appliedTwice),
    check('aggregates applied out of seq order', 0, disordered.length, disordered),
    check('aggregates whose applied seq != last seq', 0, seqMismatch.length, seqMismatch),
    check('SKUs whose reserved qty != live orders', 0, inventoryMismatch.length, inventoryMismatch),
    check('parked events (waiting for a gap)', 0, parkedCount),
    check('corrupt entries in Redis (not a number / not JSON)', 0, corrupt.length, corrupt),
    { name: 'dead-lettered entries', expected: '-', actual: String(dead), status: 'info' },
    { name: 'still queued / in processing lists', expected: '-', actual: `${flight.queued} / ${flight.processing}`, status: 'info' },
  ];
  return {
    checks,
    lost,
    figures: {
      orders: orders.length,
      outbox: eventIds.length,
      pruned,
      processedUnique: processedCount,
      lost: lost.length,
      outOfOrder: disordered.length,
      appliedTwice: appliedTwice.length,
      inventoryMismatches: inventoryMismatch.length,
      parked: parkedCount,
      deadLettered: dead,
      inFlight: flight.queued + flight.processing,
      redisStateLost,
      unrecoverable,
    },
  };
}

export function formatChecks(checks: InvariantCheck[]): string[] {
  const nameWidth = Math.max(5, ...checks.map((c) => c.name.length));
  const expectedWidth = Math.max(8, ...checks.map((c) => c.expected.length));
  const actualWidth = Math.max(6, ...checks.map((c) => c.actual.length));
  const row = (name: string, expected: string, actual: string, status: string) =>
    `${name.padEnd(nameWidth)}  ${expected.padStart(expectedWidth)}  ${actual.padStart(actualWidth)}  ${status}`;
  const lines = [row('check', 'expected', 'actual', 'result')];
  for (const c of checks) {
    lines.push(row(c.name, c.expected, c.actual, c.status));
    if (c.examples?.length) lines.push(`${' '.repeat(2)}e.g. ${c.examples.join(', ')}`);
  }
  const failed = checks.filter((c) => c.status === 'FAIL').length;
  lines.push(failed === 0 ? 'VERIFY OK' : `VERIFY FAILED: ${failed} invariant${failed === 1 ? '' : 's'} broken`);
  return lines;
}
