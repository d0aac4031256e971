import { keys } from '../../outbox/redis/keys.js';
import { guardKeyOf } from '../../outbox/redis/guards.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { guardDropped, mayBeSwept, type WindowState } from '../../outbox/redis/dedupe-window.js';
import type { AggregateSlice } from './aggregate-stream.js';
import type { ChunkEvidence } from './chunk-evidence.js';
import { INTEGER, sumCounts, type ConsumerState, type Flight } from './consumer-state.js';
import type { Findings } from './findings.js';
import type { AggregateRow, NewerEvent, PrunedAggregate } from './store-snapshot.js';

/** A processed entry's applyOrder (0 when it has none); null for no entry. */
export function applyOrderOf(value: string | null): number | null {
  if (value === null) return null;
  try {
    const order = (JSON.parse(value) as { applyOrder?: unknown }).applyOrder;
    return typeof order === 'number' ? order : 0;
  } catch {
    return 0;
  }
}

/** Whether a processed entry shows its event applied by the instant the counter was read. */
export function appliedBy(value: string | null, counter: number): boolean {
  const order = applyOrderOf(value);
  return order !== null && order <= counter;
}

/** A processed entry's applyOrder (0 when it has none); null for no entry, 'corrupt' for one that is not a JSON object. */
function processedOrder(value: string | null): number | null | 'corrupt' {
  if (value === null) return null;
  try {
    const entry = JSON.parse(value) as unknown;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) return 'corrupt';
    const order = (entry as { applyOrder?: unknown }).applyOrder;
    return typeof order === 'number' ? order : 0;
  } catch {
    return 'corrupt';
  }
}

/** A field where a count belongs but Redis holds something else, named per partition when there are several. */
export function corruptField(partitionCount: number, index: number, key: string, field: string, value: string): string {
  return `${partitionCount > 1 ? `partition ${index}: ` : ''}${key} ${field} = ${JSON.stringify(value.slice(0, 40))}`;
}

/** What is judged as one aggregate's: its rows, its guard at its first chunk's instant, and what its events showed. */
export interface AggregateState {
  key: string;
  partition: number;
  served: boolean;
  /** Its guard at its first chunk's MULTI, and the applied counter and window hash of that instant. */
  guard: string | null;
  seqCounter: number;
  window: WindowState;
  row?: AggregateRow;
  pruned?: PrunedAggregate;
  lastOrder: number;
  disordered: boolean;
  deadFrom: number;
  appliedAny: boolean;
  /** Seq P + 1 (P: its pruned seq, 0 for none) applied by the MULTI's instant. */
  appliedAfterPruned: boolean;
  chainThrough: number;
  chainBroken: boolean;
}

/** What the stream judges with, besides each chunk's evidence. */
export interface StreamContext {
  partitions: Partitions;
  /** Each partition's state at its MULTI (counter N, meta). */
  states: ConsumerState[];
  flight: Flight;
  /** The events beyond the horizon known so far (S1's and S2's), by aggregate. */
  newerByAggregate: Map<string, NewerEvent[]>;
  findings: Findings;
  /** Aggregates with events beyond the horizon: their seq checks wait for those events' processed entries. */
  deferred: AggregateState[];
}

/**
 * Judges the snapshot chunk by chunk, aggregate by aggregate, in the order the store gives them:
 * each event against its chunk's evidence (the same instant for its guard, entries and window),
 * each aggregate once its last slice is in. The findings keep counts and a few examples, and in full
 * only what is wrong; an aggregate's state is dropped once it is judged.
 */
export class StreamJudge {
  private current: AggregateState | undefined;

  constructor(private readonly ctx: StreamContext) {}

  chunk(slices: AggregateSlice[], evidence: ChunkEvidence): void {
    for (const slice of slices) {
      if (slice.first || this.current?.key !== slice.key) this.start(slice, evidence);
      for (const event of slice.events) this.event(this.current!, event, evidence);
    }
  }

  /** Judges the last aggregate: call once the stream ended. */
  end(): void {
    if (this.current) finishAggregate(this.ctx, this.current);
    this.current = undefined;
  }

  private start(slice: AggregateSlice, evidence: ChunkEvidence): void {
    this.end();
    const { partitions, states, findings } = this.ctx;
    const partition = partitions.count === 1 ? 0 : partitions.indexOf(slice.key);
    const read = evidence.reads[partition]!;
    const guard = evidence.guards.get(slice.key) ?? null;
    if (guard !== null) {
      findings.found[partition] += 1;
      if (!INTEGER.test(guard)) findings.corrupt.add(corruptField(partitions.count, partition, guardKeyOf(slice.key), slice.key, guard));
    }
    const applied = Number(guard ?? 0);
    this.current = {
      key: slice.key,
      partition,
      served: states[partition].meta.store !== undefined,
      guard,
      seqCounter: read.counter,
      window: read.window,
      row: slice.row,
      pruned: slice.pruned,
      lastOrder: 0,
      disordered: false,
      deadFrom: Infinity,
      appliedAny: false,
      appliedAfterPruned: false,
      chainThrough: Math.max(applied, slice.pruned?.throughSeq ?? 0),
      chainBroken: false,
    };
  }

  private event(a: AggregateState, e: AggregateSlice['events'][number], evidence: ChunkEvidence): void {
    const { partitions, states, flight, findings } = this.ctx;
    const id = e.event_id;
    findings.events += 1;
    const guard = evidence.guards.get(a.key) ?? null;
    const processed = evidence.processed.get(id) ?? null;
    const counts = evidence.applyCounts.get(id) ?? [];
    counts.forEach((value, index) => {
      if (value !== null && !INTEGER.test(value)) findings.corrupt.add(corruptField(partitions.count, index, keys.applyCount, id, value));
    });
    const count = sumCounts(counts);
    const order = processedOrder(processed);
    if (order === 'corrupt') findings.corrupt.add(`${keys.processed} ${id} is not the JSON the consumer writes`);
    const window = evidence.reads[a.partition]!.window;
    // Applied, its records swept by the dedupe window: beyond the window the seq guard is the evidence;
    // with no guard, past the aggregate horizon it was dropped, the event applied before that.
    const recordless = processed === null && count === undefined && a.served;
    const swept = recordless && (guard === null ? guardDropped(e.created_at, window) : e.seq <= Number(guard) && mayBeSwept(e.created_at, window));
    if (swept) findings.sweptInSnapshot += 1;
    // One parse per entry: one that is not a JSON object counts as applyOrder 0, as `applyOrderOf` reads it.
    const applied = swept || (order !== null && (order === 'corrupt' ? 0 : order) <= states[a.partition].appliedCounter);
    // A seq Redis applied as an event the store no longer holds (see `Ledger`: the store is behind Redis).
    const taken = !swept && recordless && e.seq <= Number(guard ?? 0);
    if (taken) {
      findings.taken.add({ event_id: id, aggregate_id: e.aggregate_id, seq: e.seq });
      findings.behindPartitions.add(a.partition);
    }
    if (Number(count ?? 0) > 1) findings.appliedTwice.add(`${id} (${count} times${partitions.count > 1 ? `, partition ${a.partition}` : ''})`);
    if (order !== null && order !== 'corrupt') {
      if (order <= a.lastOrder) a.disordered = true;
      a.lastOrder = order;
    }
    // Dead-lettered, and its aggregate's later events (parked behind it): set aside, not in flight.
    if (flight.dead.has(id)) a.deadFrom = Math.min(a.deadFrom, e.seq);
    if (!taken && e.seq < a.deadFrom && (e.status === 'PENDING' || !applied)) findings.inFlight.push(id);
    if (e.status === 'PUBLISHED' && processed === null && !swept && !flight.ids.has(id) && !flight.dead.has(id) && !taken) {
      findings.unaccounted.push({ event_id: id, aggregate_id: e.aggregate_id });
    }
    if (!applied) return;
    a.appliedAny = true;
    if (e.seq === (a.pruned?.throughSeq ?? 0) + 1) a.appliedAfterPruned = true;
    if (a.chainBroken || e.seq <= a.chainThrough) return;
    if (e.seq === a.chainThrough + 1) a.chainThrough = e.seq;
    else a.chainBroken = true;
  }
}

/** Whether the horizon dropped an aggregate's guard: none, and its last event committed by `droppedThrough`. */
export function droppedGuard(a: AggregateState): boolean {
  return a.guard === null && guardDropped(a.row?.lastAt ?? 0, a.window);
}

/**
 * An aggregate's own checks once its events are in: order, a guard behind its processed entries or
 * its pruned seq; its guard against its last seq unless it has events beyond the horizon (`deferred`).
 */
function finishAggregate(ctx: StreamContext, a: AggregateState): void {
  const { findings } = ctx;
  if (a.disordered) findings.disordered.add(a.key);
  const applied = Number(a.guard ?? 0);
  const dropped = droppedGuard(a);
  const pruned = a.pruned;
  if (pruned && !dropped && Number.isSafeInteger(applied) && applied < pruned.throughSeq && a.served && !a.appliedAfterPruned) {
    findings.prunedCandidates.push({ key: a.key, throughSeq: pruned.throughSeq, events: pruned.events, appliedSeq: applied, chainThrough: a.chainThrough });
  } else if (a.appliedAny && Number.isSafeInteger(applied) && a.served) {
    const from = a.appliedAfterPruned ? applied : Math.max(applied, pruned?.throughSeq ?? 0);
    if (a.chainThrough > from) findings.seqBehind.push({ aggregate: a.key, appliedSeq: applied, throughSeq: a.chainThrough });
  }
  if (ctx.newerByAggregate.has(a.key)) ctx.deferred.push(a);
  else judgeSeq(ctx, a, 0, 0);
}

/**
 * An aggregate's guard against the store's last seq: != it (for the aggregates of outbox_aggregates),
 * or past it (Redis applied events the store no longer holds). `newerApplied`: the last seq of its
 * events beyond the horizon applied by its guard's read (0: none); `newerLast`: of those committed.
 */
export function judgeSeq(ctx: StreamContext, a: AggregateState, newerApplied: number, newerLast: number): void {
  const { findings } = ctx;
  const applied = Number(a.guard ?? 0);
  if (a.row && applied !== Math.max(a.row.lastSeq, newerApplied) && !(droppedGuard(a) && newerApplied === 0)) {
    findings.seqMismatch.add(a.key);
  }
  const last = Math.max(a.row?.lastSeq ?? 0, newerLast);
  if (a.guard !== null) judgePast(ctx, a.key, a.partition, a.served, a.guard, last);
}

/** A guard past the store's last seq of its aggregate, in a partition that serves the store. */
export function judgePast(ctx: StreamContext, aggregate: string, partition: number, served: boolean, guard: string, last: number): void {
  const applied = Number(guard);
  if (!(Number.isSafeInteger(applied) && applied > last && served)) return;
  ctx.findings.overtaken.add({ aggregate, applied, last });
  ctx.findings.behindPartitions.add(partition);
}
