import type { Redis } from 'ioredis';
import type { Db } from '../db/open-database.js';
import { keys } from '../redis/keys.js';

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

async function processingListLengths(redis: Redis): Promise<number> {
  let total = 0;
  for await (const batch of redis.scanStream({ match: keys.processingPattern, count: 1000 })) {
    for (const key of batch as string[]) total += await redis.llen(key);
  }
  return total;
}

/**
 * Reconciles SQLite (the source of truth) with what the consumer applied in Redis. Meaningful when
 * the system is quiescent: while events are still in flight, the delivery checks fail by design.
 */
export async function verifyStores(db: Db, redis: Redis): Promise<InvariantCheck[]> {
  const incomplete = db
    .prepare<[], { id: number }>(
      `SELECT o.id FROM orders o
        WHERE (SELECT COUNT(*) FROM outbox e WHERE e.aggregate_id = o.id) <> o.version
           OR NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.id AND e.seq = o.version)`,
    )
    .all();
  const orphans = db
    .prepare<[], { event_id: string }>('SELECT event_id FROM outbox e WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = e.aggregate_id)')
    .all();
  const pending = db.prepare<[], { id: number }>("SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id").all();
  const eventIds = db.prepare<[], { event_id: string }>('SELECT event_id FROM outbox ORDER BY id').pluck().all() as unknown as string[];
  const orders = db.prepare<[], { id: number; version: number }>('SELECT id, version FROM orders ORDER BY id').all();
  const reservedBySku = new Map(
    db
      .prepare<[], { sku: string; qty: number }>("SELECT sku, SUM(qty) AS qty FROM orders WHERE status = 'PLACED' GROUP BY sku")
      .all()
      .map((row) => [row.sku, row.qty]),
  );

  const [processedCount, processed, appliedSeqs, inventory, parked, dead, queued, inFlight] = await Promise.all([
    redis.hlen(keys.processed),
    hashValues(redis, keys.processed, eventIds),
    hashValues(redis, keys.appliedSeq, orders.map((o) => String(o.id))),
    redis.hgetall(keys.inventory),
    redis.hlen(keys.parked),
    redis.llen(keys.deadLetter),
    redis.llen(keys.events),
    processingListLengths(redis),
  ]);

  const missing = eventIds.filter((_, i) => processed[i] === null);
  const seqMismatch = orders.filter((o, i) => Number(appliedSeqs[i] ?? 0) !== o.version).map((o) => `order ${o.id}`);
  const skus = new Set([...reservedBySku.keys(), ...Object.keys(inventory)]);
  const inventoryMismatch = [...skus]
    .filter((sku) => Number(inventory[sku] ?? 0) !== (reservedBySku.get(sku) ?? 0))
    .map((sku) => `${sku}: reserved ${inventory[sku] ?? 0}, orders say ${reservedBySku.get(sku) ?? 0}`);

  return [
    check('orders with missing events', 0, incomplete.length, incomplete.map((o) => `order ${o.id}`)),
    check('events without an order', 0, orphans.length, orphans.map((e) => e.event_id)),
    check('PENDING outbox rows', 0, pending.length, pending.map((p) => `row ${p.id}`)),
    check('processed_unique = outbox rows', eventIds.length, processedCount),
    check('outbox events never applied (lost)', 0, missing.length, missing),
    check('aggregates whose applied seq != last seq', 0, seqMismatch.length, seqMismatch),
    check('SKUs whose reserved qty != live orders', 0, inventoryMismatch.length, inventoryMismatch),
    check('parked events (waiting for a gap)', 0, parked),
    { name: 'dead-lettered entries', expected: '-', actual: String(dead), status: 'info' },
    { name: 'still queued / in processing lists', expected: '-', actual: `${queued} / ${inFlight}`, status: 'info' },
  ];
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
