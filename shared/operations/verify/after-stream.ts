import type { Redis } from 'ioredis';
import { keys } from '../../outbox/redis/keys.js';
import { countGuards, guardKeyOf, guardsOfReplies, queueGuardReads, readGuards, scanGuards } from '../../outbox/redis/guards.js';
import { byPartition, type Partitions } from '../../outbox/redis/partitions.js';
import { INTEGER } from './consumer-state.js';
import { appliedBy, corruptField, judgePast, judgeSeq, type StreamContext } from './judge-stream.js';
import type { AppliedSeqBehind, Findings, PrunedBehind } from './findings.js';
import type { StoreSnapshot } from './store-snapshot.js';

/** Aggregates asked of the store, or guards of Redis, per call. */
const BATCH = 500;

/** The aggregate of a parked field ("<aggregate>:<seq>"), undefined for a field that is not one. */
export function aggregateOfField(field: string): string | undefined {
  const cut = field.lastIndexOf(':');
  return cut > 0 ? field.slice(0, cut) : undefined;
}

/**
 * The aggregates with events beyond the horizon, once those events' processed entries are read:
 * each guard against the last seq its events applied by the guard's read show (`seqCounter`).
 */
export function judgeDeferred(ctx: StreamContext, processedNewer: Map<string, string | null>): void {
  for (const a of ctx.deferred) {
    let applied = 0;
    let last = 0;
    for (const e of ctx.newerByAggregate.get(a.key) ?? []) {
      last = Math.max(last, e.seq);
      if (appliedBy(processedNewer.get(e.event_id) ?? null, a.seqCounter)) applied = Math.max(applied, e.seq);
    }
    judgeSeq(ctx, a, applied, last);
  }
  ctx.deferred.length = 0;
}

/**
 * The guards of aggregates the snapshot does not hold but verify knows of (events beyond the horizon,
 * parked entries): counted as found, and judged against the newer events' last seq.
 */
export async function judgeExtras(ctx: StreamContext, snapshot: StoreSnapshot, extras: Set<string>, refreshNewer: () => Promise<void>): Promise<void> {
  const { partitions, states, findings } = ctx;
  const unknown: string[] = [];
  const all = [...extras];
  for (let first = 0; first < all.length; first += BATCH) {
    const batch = all.slice(first, first + BATCH);
    const known = await snapshot.known(batch);
    for (const key of batch) if (!known.has(key)) unknown.push(key);
  }
  const found: { key: string; index: number; guard: string }[] = [];
  for (const [index, group] of byPartition(partitions, unknown, (key) => key)) {
    for (let first = 0; first < group.length; first += BATCH) {
      const batch = group.slice(first, first + BATCH);
      const guards = await readGuards(partitions.clients[index], batch);
      batch.forEach((key, i) => guards[i] !== null && found.push({ key, index, guard: guards[i]! }));
    }
  }
  // The store after the guards: an event applied by their read was committed by then.
  if (found.length > 0) await refreshNewer();
  for (const { key, index, guard } of found) {
    findings.found[index] += 1;
    if (!INTEGER.test(guard)) findings.corrupt.add(corruptField(partitions.count, index, guardKeyOf(key), key, guard));
    judgePast(ctx, key, index, states[index].meta.store !== undefined, guard, lastNewerSeq(ctx, key));
  }
}

/** The last seq of an aggregate's events beyond the horizon known so far (0: none). */
function lastNewerSeq(ctx: StreamContext, key: string): number {
  let last = 0;
  for (const e of ctx.newerByAggregate.get(key) ?? []) last = Math.max(last, e.seq);
  return last;
}

/**
 * Where a partition holds more guards than verify found among the aggregates it knows, the others:
 * every bucket read a few hundred at a time (guards.ts's `scanGuards`), each guard's aggregate looked
 * up in the snapshot in batches, then the store's newer rows (an aggregate new since is not past
 * it). Such a guard is of an aggregate the store does not hold: Redis applied events of it (past
 * the store), or its value is not a seq (corrupt).
 */
export async function walkUnknownGuards(ctx: StreamContext, snapshot: StoreSnapshot, extras: Set<string>, refreshNewer: () => Promise<void>): Promise<void> {
  const { partitions, states, findings } = ctx;
  for (let index = 0; index < partitions.count; index += 1) {
    const client = partitions.clients[index];
    const counted = findings.guardCounts[index] >= 0 ? findings.guardCounts[index] : await countGuards(client);
    if (counted <= findings.found[index]) continue;
    const served = states[index].meta.store !== undefined;
    for await (const pairs of scanGuards(client)) {
      const unknown: [string, string][] = [];
      for (let first = 0; first < pairs.length; first += BATCH) {
        const batch = pairs.slice(first, first + BATCH).filter(([key]) => !extras.has(key));
        const known = await snapshot.known(batch.map(([key]) => key));
        for (const pair of batch) if (!known.has(pair[0])) unknown.push(pair);
      }
      if (unknown.length === 0) continue;
      await refreshNewer();
      for (const [key, guard] of unknown) {
        if (!INTEGER.test(guard)) findings.corrupt.add(corruptField(partitions.count, index, guardKeyOf(key), key, guard));
        judgePast(ctx, key, index, served, guard, lastNewerSeq(ctx, key));
      }
    }
  }
}

function processedEntry(value: string): { aggregate?: unknown; aggregateId?: unknown; seq?: unknown; applyOrder?: unknown } | undefined {
  try {
    const entry: unknown = JSON.parse(value);
    return typeof entry === 'object' && entry !== null ? entry : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Of the pruned candidates (aggregates whose applied seq is below their pruned seq P, seq P + 1 not
 * shown applied), the highest pruned seq Q (<= P) whose event's processed entry is in Redis, applied
 * by the MULTI's instant: the events through Q were applied (prune deletes applied events only, and
 * the consumer applies an aggregate's events in seq order). Q = P: the whole pruned prefix was, and
 * only the applied seq was lost, as when every event of an aggregate was pruned and then the guard
 * went. Q < P: only the pruned events after Q lost their effects (an older copy of Redis). The store
 * no longer holds those events' ids, so their partition's processed hash is scanned (HSCAN, a
 * thousand a call): only when there are candidates, which only a fault makes. Each entry names its
 * aggregate and seq (`aggregate` in Redis mode, `aggregateId` in database mode).
 */
async function prunedSeqsApplied(partitions: Partitions, counters: number[], candidates: { key: string; throughSeq: number }[]): Promise<Map<string, number>> {
  const highest = new Map<string, number>();
  for (const [index, group] of byPartition(partitions, candidates, (c) => c.key)) {
    const through = new Map(group.map((c) => [c.key, c.throughSeq]));
    const counter = counters[index];
    let cursor = '0';
    do {
      const [next, entries] = await partitions.clients[index].hscan(keys.processed, cursor, 'COUNT', 1000);
      for (let i = 1; i < entries.length; i += 2) {
        const entry = processedEntry(entries[i]);
        const aggregate = entry?.aggregate ?? entry?.aggregateId;
        const seq = entry?.seq;
        if (typeof aggregate !== 'string' || typeof seq !== 'number') continue;
        const pruned = through.get(aggregate);
        // Applied by the MULTI's instant, as `appliedBy` judges (an entry without applyOrder counts as 0).
        const order = typeof entry?.applyOrder === 'number' ? entry.applyOrder : 0;
        if (pruned === undefined || seq > pruned || seq <= (highest.get(aggregate) ?? 0) || order > counter) continue;
        highest.set(aggregate, seq);
      }
      cursor = next;
    } while (cursor !== '0');
  }
  return highest;
}

/**
 * Judges the pruned candidates: those whose pruned prefix a processed entry shows applied lost only
 * their guard (`seqBehind`, from the guard), the others their pruned events' effects (`prunedBehind`).
 */
export async function judgePrunedCandidates(partitions: Partitions, counters: number[], findings: Findings): Promise<PrunedBehind[]> {
  const candidates = findings.prunedCandidates;
  if (candidates.length === 0) return [];
  const highest = await prunedSeqsApplied(partitions, counters, candidates);
  const prunedBehind: PrunedBehind[] = [];
  const seqBehind: AppliedSeqBehind[] = [];
  for (const c of candidates) {
    if (highest.get(c.key) === c.throughSeq) {
      if (c.chainThrough > c.appliedSeq) seqBehind.push({ aggregate: c.key, appliedSeq: c.appliedSeq, throughSeq: c.chainThrough });
    } else {
      prunedBehind.push({ aggregate: c.key, fromSeq: Math.max(c.appliedSeq, c.throughSeq - c.events, highest.get(c.key) ?? 0) + 1, throughSeq: c.throughSeq });
    }
  }
  findings.seqBehind.push(...seqBehind);
  return prunedBehind;
}

/** Whether a parked field's aggregate's applied seq has reached the seq before it. */
function waitsForNothing(field: string, appliedText: string | null | undefined): boolean {
  const cut = field.lastIndexOf(':');
  const seq = Number(field.slice(cut + 1));
  const applied = Number(appliedText ?? 0);
  return cut > 0 && Number.isSafeInteger(seq) && Number.isSafeInteger(applied) && applied >= seq - 1;
}

/**
 * Parked events ("<aggregate>:<seq>") whose aggregate's applied seq has reached seq - 1, in each
 * partition that serves the store: each field and its aggregate's guard read in one MULTI, a few
 * hundred at a time, so that one released meanwhile is not named.
 */
export async function releasableParked(partitions: Partitions, parkedOf: Record<string, string>[], served: boolean[]): Promise<string[]> {
  const found: string[] = [];
  for (let index = 0; index < partitions.count; index += 1) {
    if (!served[index]) continue;
    const fields = Object.keys(parkedOf[index]).filter((field) => aggregateOfField(field) !== undefined);
    for (let first = 0; first < fields.length; first += BATCH) {
      found.push(...(await releasableIn(partitions.clients[index], fields.slice(first, first + BATCH))));
    }
  }
  return found;
}

async function releasableIn(redis: Redis, fields: string[]): Promise<string[]> {
  const aggregates = fields.map((field) => aggregateOfField(field)!);
  const multi = redis.multi();
  for (const field of fields) multi.hexists(keys.parked, field);
  queueGuardReads(multi, aggregates);
  const replies = (await multi.exec())!.map(([error, value]) => (error ? null : value));
  const guards = guardsOfReplies(replies.slice(fields.length), aggregates);
  return fields.filter((field, i) => replies[i] === 1 && waitsForNothing(field, guards[i]));
}
