import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { keys } from '../../outbox/redis/keys.js';
import type { VerifyCheckSet } from '../../outbox/verify/verify-checks.js';
import { byPartition, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { readWindow, type WindowState } from '../../outbox/redis/dedupe-window.js';
import { aggregateChunks, type AggregateSlice } from './aggregate-stream.js';
import { readChunkEvidence, type ChunkEvidence } from './chunk-evidence.js';
import { idOfEnvelope, inFlight, readConsumerState, scanHash, sumHashes, type ConsumerState, type Flight } from './consumer-state.js';
import { newFindings, type Findings } from './findings.js';
import { StreamJudge, type StreamContext } from './judge-stream.js';
import { aggregateOfField, judgeDeferred, judgeExtras, walkUnknownGuards } from './after-stream.js';
import { collectGarbage } from './collect-garbage.js';
import { prunedWithInboxRow, type InboxedPruned } from './inbox-pruned.js';
import { verifyReadsOf, type NewerEvent, type ProducerSnapshot, type StoreSnapshot, type VerifyReads } from './store-snapshot.js';

export { sqliteVerifyReads, verifyReadsOf, newerEvent } from './store-snapshot.js';
export type { NewerEvent, ObservedEvent, ProducerSnapshot, PrunedAggregate, VerifyReads } from './store-snapshot.js';
export { stillInFlight, whereIs } from './where-is.js';
export { applyOrderOf } from './judge-stream.js';

/** Events and aggregates per chunk of the stream: one MULTI per partition each. */
const CHUNK = 500;
/** Chunks whose MULTIs are sent before the oldest one is judged: round trips overlap. */
const CHUNKS_IN_FLIGHT = 3;
/** Chunks between two full collections (`collectGarbage`): the heap holds the garbage of this many at most. */
const CHUNKS_PER_COLLECTION = 100;

/**
 * One look at both stores, in the order that makes an event in flight look in flight (see
 * `observe`), judged as it is read: the snapshot's events and aggregates are streamed, so what is
 * kept is counts, a few examples, and in full only what is wrong (`findings`).
 */
export interface Observation {
  horizon: number;
  /** P: how many partitions (1: one Redis, the seed's keys). */
  partitionCount: number;
  /** Each partition's consumer state at its MULTI. */
  partitionStates: ConsumerState[];
  /** The stats hashes' `applied` counter of each partition at its MULTI. */
  appliedCounters: number[];
  /** Merged over the partitions: the processed count, the check set's counter hashes and stats summed, the parked hashes. */
  processedCount: number;
  counters: Record<string, Record<string, string>>;
  stats: Record<string, string>;
  parked: Record<string, string>;
  dead: number;
  flight: Flight;
  /** Events deleted by prune, in S1. */
  pruned: number;
  /** PENDING rows up to the horizon, and the first ids; PENDING beyond it. */
  pending: number;
  pendingExamples: number[];
  pendingNewer: number;
  producerSnapshot: ProducerSnapshot;
  /** Events beyond the horizon in S1. */
  newerInSnapshot: NewerEvent[];
  /** Events beyond the horizon: S1's and those committed since (S2), with their processed entries (read last). */
  newer: NewerEvent[];
  processedNewer: (string | null)[];
  /** Each partition's window hash, read at the end. */
  windows: WindowState[];
  findings: Findings;
  /** Database mode: pruned events without their inbox row. */
  inboxed?: InboxedPruned;
}

/** The processed entries of `events`, each read in its aggregate's partition, in their order (HMGET of 1000 a call). */
async function processedOf(partitions: Partitions, events: { event_id: string; aggregate_id: string }[]): Promise<(string | null)[]> {
  const values: (string | null)[] = new Array(events.length).fill(null);
  const positions = events.map((_, i) => i);
  for (const [index, group] of byPartition(partitions, positions, (i) => events[i].aggregate_id)) {
    for (let first = 0; first < group.length; first += 1000) {
      const chunk = group.slice(first, first + 1000);
      const found = await partitions.clients[index].hmget(keys.processed, ...chunk.map((i) => events[i].event_id));
      chunk.forEach((position, j) => (values[position] = found[j]));
    }
  }
  return values;
}

/** The events beyond the horizon as they are found (S1's, then S2's a read at a time), by aggregate. */
class Newer {
  readonly all: NewerEvent[] = [];
  readonly byAggregate = new Map<string, NewerEvent[]>();
  private maxId: number;

  constructor(
    private readonly reads: VerifyReads,
    snapshot: StoreSnapshot,
  ) {
    this.maxId = snapshot.maxId;
    this.add(snapshot.newerInSnapshot);
  }

  /** S2, from where the last read ended: every event Redis applied by a read made before it was committed by then. */
  async refresh(): Promise<void> {
    this.add(await this.reads.newerThan(this.maxId));
  }

  private add(events: NewerEvent[]): void {
    for (const e of events) {
      this.all.push(e);
      this.maxId = Math.max(this.maxId, e.id);
      const list = this.byAggregate.get(e.aggregate_id);
      if (list) list.push(e);
      else this.byAggregate.set(e.aggregate_id, [e]);
    }
  }
}

/**
 * Looks at both stores, checking what the store held up to `horizon` (default: its newest row now).
 *
 * The order of the reads is what makes an event in flight look in flight and never lost, or an
 * effect that arrived early look like a bug:
 * 1. The store first (S1, one read transaction, held open while it is streamed). An event moves
 *    forward only: PENDING, pushed, marked PUBLISHED, in a processing list, applied. The relay marks
 *    a row PUBLISHED only after Redis acknowledged its push, so a row PUBLISHED in S1 is, at any later
 *    instant, queued, in a processing list, parked or applied, unless it was really lost.
 * 2. The lists, queue before processing lists (the way messages move), then the parked hash. These
 *    reads are not atomic, so an event can slip past them; it is then not applied either, counts as
 *    in flight, and is checked again: a lost event is named only after it stayed unapplied through
 *    the settle window and one atomic look (`whereIs`) finds it nowhere.
 * 3. The consumer's state in one MULTI per partition: the check set's counter hashes, the processed
 *    count with the window's swept count, and the `applied` counter N, all at one instant.
 * 4. The snapshot's aggregates in chunks, in key order (`aggregateChunks`): each chunk's guards,
 *    processed entries, apply counts and window hash in one MULTI per partition, after N, so an entry
 *    with applyOrder <= N was applied by the instant of step 3 (the apply script writes the entry and
 *    the counter in one step); a record swept since is under that read's `sweptThrough`, its guard the
 *    evidence. After each chunk, the store again (S2) for the rows committed since: every event Redis
 *    had applied by that chunk's MULTI was committed before it, so an early effect is never
 *    unexplained; an aggregate with such events is judged once their processed entries are read.
 * 5. Then the guards of aggregates the snapshot does not hold (beyond the horizon, parked, and, when
 *    the guard count says there are others, every bucket), the newer events' processed entries, and
 *    each partition's window hash.
 *
 * With partitions, steps 2 and 3 are taken in every partition and step 4 reads each aggregate in its
 * partition (apply counts in every one): an event is judged by its own partition's counter at its
 * own instant, and the counter hashes summed over the partitions are exactly the effects of the
 * events applied by those instants.
 */
export async function observe(
  store: Db | VerifyReads,
  redis: Redis | Partitions,
  horizon?: number,
  checkSet?: VerifyCheckSet<unknown>,
  scanLists = false,
  consumer?: Db,
): Promise<Observation> {
  const reads = verifyReadsOf(store);
  const partitions = partitionsOf(redis);
  const { clients } = partitions;
  const counterHashes = checkSet?.snapshot?.counterHashes ?? [];
  const snapshot = await reads.snapshot(horizon, checkSet);
  try {
    const flight = await inFlight(partitions, scanLists);
    const parked = await Promise.all(clients.map((client) => scanHash(client, keys.parked)));
    const states = await Promise.all(clients.map((client, i) => readConsumerState(client, counterHashes, parked[i])));
    for (const envelope of parked.flatMap((hash) => Object.values(hash))) {
      const id = idOfEnvelope(envelope);
      if (id) flight.ids.add(id);
    }
    const newer = new Newer(reads, snapshot);
    const newerPerAggregate = new Map([...newer.byAggregate].map(([key, events]) => [key, events.length]));
    const ctx: StreamContext = { partitions, states, flight, newerByAggregate: newer.byAggregate, findings: newFindings(partitions.count), deferred: [] };
    const judge = new StreamJudge(ctx);
    // A few chunks' MULTIs in flight at once (each its own instant), each judged in order once the
    // store was read again after it.
    let chunksJudged = 0;
    const inFlightChunks: { slices: AggregateSlice[]; evidence: Promise<ChunkEvidence> }[] = [];
    const judgeNext = async () => {
      const { slices, evidence } = inFlightChunks.shift()!;
      const read = await evidence;
      read.reads.forEach((r, index) => {
        if (r) ctx.findings.guardCounts[index] = r.guardCount;
      });
      await newer.refresh();
      judge.chunk(slices, read);
      if ((chunksJudged += 1) % CHUNKS_PER_COLLECTION === 0) collectGarbage();
    };
    try {
      for await (const slices of aggregateChunks(snapshot, newerPerAggregate, CHUNK)) {
        const evidence = readChunkEvidence(partitions, slices);
        evidence.catch(() => {});
        inFlightChunks.push({ slices, evidence });
        if (inFlightChunks.length >= CHUNKS_IN_FLIGHT) await judgeNext();
      }
      while (inFlightChunks.length > 0) await judgeNext();
    } finally {
      await Promise.allSettled(inFlightChunks.map((c) => c.evidence));
    }
    judge.end();
    await newer.refresh();
    const extras = new Set(newer.byAggregate.keys());
    for (const field of parked.flatMap((hash) => Object.keys(hash))) {
      const aggregate = aggregateOfField(field);
      if (aggregate !== undefined) extras.add(aggregate);
    }
    await judgeExtras(ctx, snapshot, extras, () => newer.refresh());
    await walkUnknownGuards(ctx, snapshot, extras, () => newer.refresh());
    const processedNewer = await processedOf(partitions, newer.all);
    judgeDeferred(ctx, new Map(newer.all.map((e, i) => [e.event_id, processedNewer[i]])));
    const windows = await Promise.all(clients.map(readWindow));
    const inboxed = consumer === undefined || snapshot.pruned === 0 ? undefined : await prunedWithInboxRow(consumer, snapshot.prunedAgain());
    return {
      horizon: snapshot.horizon,
      partitionCount: partitions.count,
      partitionStates: states,
      appliedCounters: states.map((s) => s.appliedCounter),
      processedCount: states.reduce((n, s) => n + s.processedCount, 0),
      counters: Object.fromEntries(counterHashes.map((key) => [key, sumHashes(states.map((s) => s.counters[key]))])),
      stats: sumHashes(states.map((s) => s.stats)),
      parked: Object.assign({}, ...parked) as Record<string, string>,
      dead: states.reduce((n, s) => n + s.dead, 0),
      flight,
      pruned: snapshot.pruned,
      pending: snapshot.pending,
      pendingExamples: snapshot.pendingExamples,
      pendingNewer: snapshot.pendingNewer,
      producerSnapshot: snapshot.producerSnapshot,
      newerInSnapshot: snapshot.newerInSnapshot,
      newer: newer.all,
      processedNewer,
      windows,
      findings: ctx.findings,
      inboxed: consumer === undefined ? undefined : (inboxed ?? { missing: 0, examples: [] }),
    };
  } finally {
    await snapshot.close();
  }
}
