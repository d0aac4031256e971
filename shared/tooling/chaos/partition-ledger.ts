import { keys } from '../../outbox/redis/keys.js';
import type { Partitions } from '../../outbox/redis/partitions.js';

export interface OutboxRowRef {
  event_id: string;
  aggregate_id: string;
  seq: number | string;
}

/** What the stores say of a run across partitions: each list names the events concerned. */
export interface PartitionLedger {
  events: number;
  aggregates: number;
  /** Rows not applied in their aggregate's partition. */
  lost: string[];
  /** Rows applied more than once (the apply count the script keeps with the effect). */
  appliedTwice: string[];
  /** Rows applied before an earlier seq of their aggregate (applyOrder, the partition's own counter, must rise with seq). */
  outOfOrder: string[];
  /** Applied entries that are not rows of the store. */
  extra: number;
  deadLettered: number;
  parked: number;
  /** Messages still queued or in flight, over every partition. */
  queued: number;
}

/**
 * The ledger of `rows` (every outbox row, any order) against the partitions' Redis state: every
 * event applied exactly once, in its aggregate's partition, in seq order per aggregate; nothing
 * dead-lettered, parked or queued.
 */
export async function partitionLedger(rows: readonly OutboxRowRef[], partitions: Partitions): Promise<PartitionLedger> {
  const state = await Promise.all(
    partitions.clients.map(async (redis) => {
      const [processed, counts, dead, parked, queued] = await Promise.all([
        redis.hgetall(keys.processed),
        redis.hgetall(keys.applyCount),
        redis.llen(keys.deadLetter),
        redis.hlen(keys.parked),
        redis.llen(keys.events),
      ]);
      return { processed, counts, dead, parked, queued };
    }),
  );
  const sorted = [...rows].sort((a, b) => (a.aggregate_id < b.aggregate_id ? -1 : a.aggregate_id > b.aggregate_id ? 1 : Number(a.seq) - Number(b.seq)));
  const ledger: PartitionLedger = { events: rows.length, aggregates: 0, lost: [], appliedTwice: [], outOfOrder: [], extra: 0, deadLettered: 0, parked: 0, queued: 0 };
  const lastOrder = new Map<string, number>();
  let applied = 0;
  for (const row of sorted) {
    const { processed, counts } = state[partitions.indexOf(row.aggregate_id)];
    const name = `${row.aggregate_id}#${row.seq}`;
    const value = processed[row.event_id];
    if (value === undefined) {
      ledger.lost.push(name);
      continue;
    }
    applied += 1;
    if (counts[row.event_id] !== '1') ledger.appliedTwice.push(`${name} (${counts[row.event_id] ?? 'no'} apply count)`);
    const order = (JSON.parse(value) as { applyOrder: number }).applyOrder;
    if (order <= (lastOrder.get(row.aggregate_id) ?? 0)) ledger.outOfOrder.push(name);
    lastOrder.set(row.aggregate_id, order);
  }
  ledger.aggregates = new Set(rows.map((row) => row.aggregate_id)).size;
  for (const s of state) {
    ledger.extra += Object.keys(s.processed).length;
    ledger.deadLettered += s.dead;
    ledger.parked += s.parked;
    ledger.queued += s.queued;
  }
  ledger.extra -= applied;
  return ledger;
}

/** Whether the ledger is clean: nothing lost, doubled, reordered, extra, dead, parked or queued. */
export function ledgerHolds(ledger: PartitionLedger): boolean {
  return ledger.lost.length + ledger.appliedTwice.length + ledger.outOfOrder.length + ledger.extra + ledger.deadLettered + ledger.parked + ledger.queued === 0;
}
