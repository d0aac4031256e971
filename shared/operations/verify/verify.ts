import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { eventIdOf, toMessage } from '../../outbox/store/events.js';
import { keys } from '../../outbox/redis/keys.js';
import { guardKeyOf } from '../../outbox/redis/guards.js';
import { EXAMPLES, invariantCheck as check, type InvariantCheck, type VerifyCheckSet } from '../../outbox/verify/verify-checks.js';
import { readEnvelope } from '../../outbox/redis/envelope.js';
import { sleep } from '../../outbox/sleep.js';
import { formatDuration } from '../../outbox/duration.js';
import { applyOrderOf, observe, stillInFlight, verifyReadsOf, whereIs, type Observation, type PrunedAggregate, type VerifyReads } from './observe.js';
import { runCheckSet } from './run-check-set.js';
import { byPartition, partitionOf, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { guardDropped } from '../../outbox/redis/dedupe-window.js';
import { partitionsAhead } from '../../outbox/relay/store-pairing.js';

export type { InvariantCheck } from '../../outbox/verify/verify-checks.js';

const INTEGER = /^-?\d+$/;

/** Fields where a count belongs but Redis holds something else, and parked entries that are not JSON: what the apply script refuses to build on. */
function corruptEntries(counts: Record<string, Record<string, string>>, parked: Record<string, string>): string[] {
  const found: string[] = [];
  for (const [key, hash] of Object.entries(counts)) {
    for (const [field, value] of Object.entries(hash)) {
      // A guard is named by its bucket: the key an operator fixes.
      const named = key === keys.appliedSeq ? guardKeyOf(field) : key;
      if (!INTEGER.test(value)) found.push(`${named} ${field} = ${JSON.stringify(value.slice(0, 40))}`);
    }
  }
  for (const [field, value] of Object.entries(parked)) {
    if (readEnvelope(value) === undefined) found.push(`${keys.parked} ${field} is not a parked entry`);
  }
  return found;
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

/** Aggregates whose events were applied in another order than their seq (by the recorded applyOrder). */
function outOfOrder(events: { aggregate_id: string; seq: number }[], orders: (number | null | 'corrupt')[]): string[] {
  const last = new Map<string, number>();
  const broken = new Set<string>();
  events.forEach((event, i) => {
    const order = orders[i];
    // A corrupt entry is counted as such (corrupt entries), not as an order.
    if (order === null || order === 'corrupt') return;
    if (order <= (last.get(event.aggregate_id) ?? 0)) broken.add(event.aggregate_id);
    last.set(event.aggregate_id, order);
  });
  return [...broken];
}


export interface VerifyOptions {
  /**
   * How long to wait for what was in flight at the snapshot (PENDING rows, events not applied yet)
   * before judging, in ms. 0 (the default here; the CLI's is 5 s): judge the snapshot as it is.
   */
  settleMs?: number;
  /** Called once the snapshot is taken, when it holds events in flight and verify is about to wait for them. */
  onSettling?: (inFlight: number, windowMs: number) => void;
  /**
   * A domain's invariants (the lab's `labVerifyChecks`, or a user's `--checks` module), run on the
   * look verify judges, after its own checks. None: only the outbox's own checks.
   */
  checks?: VerifyCheckSet<any>;
  /**
   * Database mode: the consumer's own database, for the check set (the caller runs inbox-checks.ts on
   * it). Its inbox also holds the pruned events applied: a pruned event whose processed entry Redis
   * lost lost no effect when its inbox row is there.
   */
  consumer?: Db;
  /** Called when a check of the set throws (its row then fails with the message). */
  onCheckError?: (check: string, message: string) => void;
}

export interface SettleFigures {
  windowMs: number;
  /** Events of the snapshot that were PENDING or not applied yet. */
  inFlight: number;
  /** Of those, applied (and marked PUBLISHED) within the window. */
  cleared: number;
  /** How long verify waited for them. */
  waitedMs: number;
  /** Events committed after the snapshot, not applied yet when verify looked last: not judged. */
  newerInFlight: number;
}

/** An aggregate whose pruned seqs `fromSeq`-`throughSeq` Redis no longer counts as applied. */
export interface PrunedBehind {
  aggregate: string;
  fromSeq: number;
  throughSeq: number;
}

/** An aggregate whose applied seq Redis holds below `throughSeq`, the last seq its events' processed entries show applied in order. */
export interface AppliedSeqBehind {
  aggregate: string;
  appliedSeq: number;
  throughSeq: number;
}

export interface Ledger {
  checks: InvariantCheck[];
  /** Outbox events that were never applied and are nowhere in Redis: what `--repair` republishes. */
  lost: string[];
  settle: SettleFigures;
  figures: {
    outbox: number;
    /** Events deleted by `outbox prune`. */
    pruned: number;
    processedUnique: number;
    /** Events whose processed entry and apply count the dedupe window's sweeps dropped (every partition's). */
    swept: number;
    /** Of the snapshot's events, those judged applied by their seq guard, their records swept. */
    sweptInSnapshot: number;
    lost: number;
    outOfOrder: number;
    /** Events whose effect was applied more than once (per-event apply counts). */
    appliedTwice: number;
    parked: number;
    deadLettered: number;
    inFlight: number;
    /** Redis serves no store although this one published: it lost its state and was not rebuilt yet. */
    redisStateLost: boolean;
    /** Events pruned from SQLite before Redis lost its state: their effects cannot be rebuilt. */
    unrecoverable: number;
    /** The partitions the store is behind (restored from an older backup under them): `--repair` clears and rebuilds them. */
    ahead: number[];
    /**
     * Aggregates whose applied seq is behind their pruned seq in a partition that kept its state,
     * no processed entry showing the pruned events applied (Redis restored from an older copy after
     * a prune; see `prunedSeqsApplied`): those events' effects are gone, and the
     * aggregate's next events wait, parked, for seqs that can never come. `--repair` raises it.
     */
    prunedBehind: PrunedBehind[];
    /**
     * Aggregates whose applied seq is behind the events Redis applied (their processed entries),
     * in a partition that serves the store: Redis lost the applied seq alone (the hash deleted, a
     * partial restore) and kept the rest. The aggregate's next events park for seqs that were
     * applied already and are never delivered again. `--repair` raises it.
     */
    seqBehind: AppliedSeqBehind[];
    /**
     * Parked events ("<aggregate>:<seq>") whose aggregate's applied seq has reached seq - 1: they
     * wait for nothing. The consumer releases an event's successors in the step that applies it,
     * or that puts its lost seq guard back, so only a guard put back some other way leaves one (by
     * hand, or by a consumer older than this release). `--repair` queues them again.
     */
    releasable: string[];
  };
}

/** The applied counter of an aggregate's partition at the observation's instant. */
function counterOf(o: Observation, aggregate: string): number {
  return o.appliedCounters[partitionOf(aggregate, o.partitionCount)];
}

/** " (partition <i>)" after what names a Redis-side problem, with partitions; '' with one. */
function inPartition(o: Observation, aggregate: string): string {
  return o.partitionCount > 1 ? ` (partition ${partitionOf(aggregate, o.partitionCount)})` : '';
}

/**
 * Events of the snapshot still on their way: PENDING, or not applied by the observation's instant;
 * not those whose seq another event took (`takenSeqs`: the consumer will skip them), nor those
 * dead-lettered and their aggregate's later ones (set aside, or parked behind, until an operator
 * retries the dead letter): waiting for those would only wait out the window.
 */
function inFlightOf(o: Observation): string[] {
  const taken = new Set(takenSeqs(o));
  const deadFrom = new Map<string, number>();
  for (const e of o.events) if (o.flight.dead.has(e.event_id)) deadFrom.set(e.aggregate_id, Math.min(deadFrom.get(e.aggregate_id) ?? e.seq, e.seq));
  return o.events
    .filter((e, i) => {
      if (taken.has(e) || e.seq >= (deadFrom.get(e.aggregate_id) ?? Infinity)) return false;
      return e.status === 'PENDING' || !appliedAt(o, i);
    })
    .map((e) => e.event_id);
}

/** Whether the snapshot's event `i` was applied by the observation's instant: per its processed entry, or swept. */
function appliedAt(o: Observation, i: number): boolean {
  return o.swept[i] || appliedBy(o.processed[i], counterOf(o, o.events[i].aggregate_id));
}

/** The applied counter when the applied seq of `aggregate` was read (see `readAppliedSeqs`). */
function seqCounterOf(o: Observation, aggregate: string): number {
  const index = partitionOf(aggregate, o.partitionCount);
  return o.partitionStates[index].seqCounters.get(aggregate) ?? o.appliedCounters[index];
}

/** Whether the partition of `aggregate` serves a store (has its meta hash). */
function servedPartition(o: Observation, aggregate: string): boolean {
  return o.partitionStates[partitionOf(aggregate, o.partitionCount)].meta.store !== undefined;
}

/**
 * Events never applied (no processed entry after the MULTI, no apply count at it) whose aggregate's
 * applied seq had passed their seq at the MULTI, in a partition that serves the store: Redis applied
 * another event at that seq, one the store no longer holds. (An event applied whose processed entry
 * alone was lost has its apply count: that is a lost entry, not a taken seq.) A restore cut below the last row pushed does that (on
 * PostgreSQL a row can commit after higher ids were pushed, and a dump taken meanwhile lacks it),
 * and the relay's check (`partitionsAhead`), which compares the last row pushed, cannot see it. The
 * consumer skips such an event as a duplicate, and a republish would be skipped again. Not an event
 * committed by the window's `sweptThrough`: its records were swept (`Observation.swept`), it was applied.
 */
function takenSeqs(o: Observation): Observation['events'] {
  return o.events.filter(
    (e, i) =>
      !o.swept[i] &&
      o.processed[i] === null &&
      o.applyCounts[e.event_id] === undefined &&
      servedPartition(o, e.aggregate_id) &&
      e.seq <= Number(o.appliedSeqs[e.aggregate_id] ?? 0),
  );
}

/** Each aggregate's seqs among the snapshot's events applied by the MULTI's instant, when the applied seqs were read (an entry written since is no evidence against them). */
function seqsAppliedByAggregate(o: Observation): Map<string, Set<number>> {
  const applied = new Map<string, Set<number>>();
  o.events.forEach((e, i) => {
    if (!appliedAt(o, i)) return;
    const seqs = applied.get(e.aggregate_id) ?? new Set<number>();
    applied.set(e.aggregate_id, seqs.add(e.seq));
  });
  return applied;
}

/**
 * Aggregates whose applied seq is below the seqs their processed entries show applied (see
 * `Ledger.figures.seqBehind`): from the applied seq, each next seq of the snapshot's events applied
 * by the MULTI's instant. The consumer applies an aggregate's events in seq order, so those entries
 * are a prefix, and a pruned prefix (`outbox_pruned`, through seq P) was applied when seq P + 1 was,
 * or when the processed entry of its seq P is still in Redis (`prunedApplied`, found by
 * `prunedSeqsApplied`): the chain then goes on from P. Otherwise nothing shows the pruned events
 * applied: `prunedBehind` gives the aggregate P.
 */
function appliedSeqsBehind(o: Observation, seqsApplied: Map<string, Set<number>>, prunedApplied: Set<string>): AppliedSeqBehind[] {
  const prunedThrough = new Map(o.prunedThrough.map((p) => [p.key, p.throughSeq]));
  return [...new Set([...seqsApplied.keys(), ...prunedApplied])].flatMap((aggregate) => {
    const seqs = seqsApplied.get(aggregate) ?? new Set<number>();
    const appliedSeq = Number(o.appliedSeqs[aggregate] ?? 0);
    if (!Number.isSafeInteger(appliedSeq) || !servedPartition(o, aggregate)) return [];
    const pruned = prunedThrough.get(aggregate) ?? 0;
    const from = seqs.has(pruned + 1) || prunedApplied.has(aggregate) ? appliedSeq : Math.max(appliedSeq, pruned);
    let throughSeq = Math.max(appliedSeq, pruned);
    while (seqs.has(throughSeq + 1)) throughSeq += 1;
    return throughSeq > from ? [{ aggregate, appliedSeq, throughSeq }] : [];
  });
}

/**
 * Of `candidates` (aggregates whose applied seq is below their pruned seq P, seq P + 1 not shown
 * applied), the highest pruned seq Q (<= P) whose event's processed entry is in Redis, applied by
 * the MULTI's instant: the events through Q were applied (prune deletes applied events only, and
 * the consumer applies an aggregate's events in seq order). Q = P: the whole pruned prefix was, and
 * only the applied seq was lost, as when every event of an aggregate was pruned and then
 * `outbox:applied-seq` went. Q < P: only the pruned events after Q lost their effects (an older
 * copy of Redis). The store no longer holds those events' ids, so their partition's processed hash
 * is read whole (HSCAN): only when there are candidates, which only a fault makes. Each entry names
 * its aggregate and seq (`aggregate` in Redis mode, `aggregateId` in database mode).
 */
async function prunedSeqsApplied(redis: Redis | Partitions, o: Observation, candidates: { key: string; throughSeq: number }[]): Promise<Map<string, number>> {
  const highest = new Map<string, number>();
  const partitions = partitionsOf(redis);
  for (const [index, group] of byPartition(partitions, candidates, (c) => c.key)) {
    const through = new Map(group.map((c) => [c.key, c.throughSeq]));
    const counter = o.appliedCounters[index];
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

function processedEntry(value: string): { aggregate?: unknown; aggregateId?: unknown; seq?: unknown; applyOrder?: unknown } | undefined {
  try {
    const entry: unknown = JSON.parse(value);
    return typeof entry === 'object' && entry !== null ? entry : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a parked field's aggregate's applied seq has reached the seq before it. */
function waitsForNothing(field: string, appliedText: string | null | undefined): boolean {
  const cut = field.lastIndexOf(':');
  const seq = Number(field.slice(cut + 1));
  const applied = Number(appliedText ?? 0);
  return cut > 0 && Number.isSafeInteger(seq) && Number.isSafeInteger(applied) && applied >= seq - 1;
}

/**
 * See `Ledger.figures.releasable`: each partition's parked fields against its own applied seqs. The
 * parked hash was scanned before the applied seqs were read, so a field whose predecessor was applied
 * in between (releasing it) is looked at again: field and applied seq in one MULTI.
 */
async function releasableParked(redis: Redis | Partitions, o: Observation): Promise<string[]> {
  const partitions = partitionsOf(redis);
  const found = await Promise.all(
    o.partitionStates.map(async (state, index) => {
      if (state.meta.store === undefined) return [];
      const aggregateOf = (field: string) => field.slice(0, field.lastIndexOf(':'));
      const seqs = state.appliedSeqs;
      const fields = Object.keys(state.parked).filter((field) => waitsForNothing(field, seqs[aggregateOf(field)]));
      if (fields.length === 0) return [];
      const multi = partitions.clients[index].multi();
      for (const field of fields) {
        const aggregate = aggregateOf(field);
        multi.hexists(keys.parked, field).hget(guardKeyOf(aggregate), aggregate).hget(keys.appliedSeq, aggregate);
      }
      const replies = (await multi.exec())!.map(([error, value]) => (error ? null : value));
      return fields.filter((field, i) => {
        const [parked, applied] = [replies[3 * i], (replies[3 * i + 1] ?? replies[3 * i + 2]) as string | null];
        return parked === 1 && waitsForNothing(field, applied);
      });
    }),
  );
  return found.flat();
}

/**
 * Database mode: of the pruned events (`pruned`, each aggregate's prefix 1..throughSeq), how many
 * have their inbox row in the consumer's database, i.e. their effect; the others are `missing`, the
 * first aggregates short of theirs in `examples`.
 */
function prunedWithInboxRow(consumer: Db, pruned: PrunedAggregate[]): { missing: number; examples: string[] } {
  if (pruned.length === 0) return { missing: 0, examples: [] };
  const through = new Map(pruned.map((p) => [p.key, p.throughSeq]));
  const inInbox = new Map<string, number>();
  for (const row of consumer.prepare<[], { aggregate_id: string; seq: number }>('SELECT aggregate_id, seq FROM outbox_inbox').iterate()) {
    const last = through.get(row.aggregate_id);
    if (last !== undefined && row.seq <= last) inInbox.set(row.aggregate_id, (inInbox.get(row.aggregate_id) ?? 0) + 1);
  }
  let missing = 0;
  const examples: string[] = [];
  for (const p of pruned) {
    const short = p.events - Math.min(p.events, inInbox.get(p.key) ?? 0);
    missing += short;
    if (short > 0 && examples.length < EXAMPLES) examples.push(`${p.key}: ${short} of its ${p.events} pruned event(s) without an inbox row`);
  }
  return { missing, examples };
}

/**
 * Aggregates whose applied seq at the MULTI is past the store's last seq for them (the snapshot's,
 * raised by the rows committed since, which hold every event applied by then), in a partition that
 * serves the store: Redis applied events of theirs the store no longer holds. `takenSeqs` finds the
 * same once the store wrote the aggregate's next event; this finds it before.
 */
function aggregatesPastStore(o: Observation): { aggregate: string; applied: number; last: number }[] {
  const last = new Map(o.aggregates.map((a) => [a.key, a.lastSeq]));
  for (const e of [...o.newerInSnapshot, ...o.newer]) last.set(e.aggregate_id, Math.max(last.get(e.aggregate_id) ?? 0, e.seq));
  return Object.entries(o.appliedSeqs).flatMap(([aggregate, value]) => {
    const applied = Number(value);
    const stored = last.get(aggregate) ?? 0;
    return Number.isSafeInteger(applied) && applied > stored && servedPartition(o, aggregate) ? [{ aggregate, applied, last: stored }] : [];
  });
}

function appliedBy(value: string | null, counter: number): boolean {
  const order = applyOrderOf(value);
  return order !== null && order <= counter;
}

/** A window as the setting is written: 7d, 2h, 30m, 10s, or ms. */
function windowText(ms: number): string {
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

const POLL_MS = 100;

/**
 * Reconciles the outbox store (SQLite or PostgreSQL, the source of truth) with what the consumer applied in Redis, at any time.
 *
 * It takes a snapshot (see `observe` for the order of the reads). Events committed after it are not
 * judged, but the effects Redis applied from them are accounted for, so traffic never shows as a
 * mismatch. What the snapshot held must be applied: an event PENDING or not applied yet is in
 * flight, and with `settleMs` verify waits (polling only those events) until every one was applied
 * or the window ended, then looks again with the same horizon and judges that look. A lost event
 * (never applied, in no list) does not become applied, so it fails after the window, named.
 */
export async function verifyStores(store: Db | VerifyReads, redis: Redis | Partitions, options: VerifyOptions = {}): Promise<Ledger> {
  const db = verifyReadsOf(store);
  const windowMs = options.settleMs ?? 0;
  const started = performance.now();
  const deadline = started + windowMs;
  const checkSet = options.checks;
  let o = await observe(db, redis, undefined, checkSet);
  const atSnapshot = inFlightOf(o);
  let waiting = atSnapshot;
  let fresh = true;
  let lostCheckAt = started;
  if (waiting.length > 0 && windowMs > 0) options.onSettling?.(waiting.length, windowMs);
  while (waiting.length > 0 && performance.now() < deadline) {
    // Waiting is of no use once every event still waited for is lost (PUBLISHED, nowhere in Redis
    // at one instant): nothing brings it back but a replay or repair, which set it PENDING first.
    if (performance.now() >= lostCheckAt) {
      if ((await lostNow(db, redis, waiting)).length === waiting.length) break;
      lostCheckAt = performance.now() + LOST_CHECK_MS;
    }
    await sleep(Math.min(POLL_MS, deadline - performance.now()));
    waiting = await stillInFlight(db, redis, waiting);
    fresh = false;
    if (waiting.length === 0 || performance.now() >= deadline) {
      o = await observe(db, redis, o.horizon, checkSet);
      waiting = inFlightOf(o);
      fresh = true;
    }
  }
  if (!fresh) {
    o = await observe(db, redis, o.horizon, checkSet);
    waiting = inFlightOf(o);
  }
  // Above MAX_LOST_LOOKUP unaccounted events there is no atomic look at each one: the snapshot is
  // taken again with every processing list a SCAN finds, as a list no take recorded may hold them.
  if (unaccounted(o).length > MAX_LOST_LOOKUP) {
    o = await observe(db, redis, o.horizon, checkSet, true);
    waiting = inFlightOf(o);
  }
  const waitedMs = atSnapshot.length > 0 ? performance.now() - started : 0;
  const stillWaiting = new Set(waiting);
  const settle: SettleFigures = {
    windowMs,
    inFlight: atSnapshot.length,
    cleared: atSnapshot.filter((id) => !stillWaiting.has(id)).length,
    waitedMs,
    newerInFlight: o.pendingNewer + o.processedNewer.filter((v) => v === null).length,
  };
  return judge(db, redis, o, settle, options);
}

/** The snapshot's events PUBLISHED, not applied, in none of the lists it read, not dead-lettered and not at a seq another event took (`takenIds`): lost, or in a list it did not read. */
function unaccounted(o: Observation, takenIds = new Set(takenSeqs(o).map((e) => e.event_id))): Observation['events'] {
  return o.events.filter(
    (e, i) =>
      e.status === 'PUBLISHED' &&
      o.processed[i] === null &&
      !o.swept[i] &&
      !o.flight.ids.has(e.event_id) &&
      !o.flight.dead.has(e.event_id) &&
      !takenIds.has(e.event_id),
  );
}

/** How often a settle checks whether what it waits for is lost rather than in flight. */
const LOST_CHECK_MS = 1000;
/** Above this many candidates the atomic look (LPOS per list and event) is skipped: they count as not confirmed. */
const MAX_LOST_LOOKUP = 500;

/**
 * Of `eventIds`, those PUBLISHED, not applied and in no list nor parked, in one atomic look: lost,
 * not in flight (the list reads of a snapshot can miss a message that moves meanwhile; this cannot).
 */
async function lostNow(db: VerifyReads, redis: Redis | Partitions, eventIds: string[]): Promise<string[]> {
  if (eventIds.length === 0 || eventIds.length > MAX_LOST_LOOKUP) return [];
  const rows = await db.publishedRowsOf(eventIds);
  if (rows.length === 0) return [];
  const storeId = await db.storeId();
  return whereIs(redis, rows.map((row) => ({ ...row, message: toMessage(row, storeId) })));
}

async function judge(db: VerifyReads, redis: Redis | Partitions, o: Observation, settle: SettleFigures, options: VerifyOptions): Promise<Ledger> {
  const eventIds = o.events.map((e) => e.event_id);
  const newerApplied = o.newer.filter((e, i) => appliedBy(o.processedNewer[i], counterOf(o, e.aggregate_id)));
  const newerIds = new Set(o.newer.map((e) => e.event_id));
  const parkedOfSnapshot = Object.values(o.parked).filter((envelope) => {
    const message = readEnvelope(envelope)?.message;
    const id = message === undefined ? undefined : eventIdOf(message);
    return id === undefined || !newerIds.has(id);
  }).length;
  // Each partition's own hashes: a sum would hide which one holds the entry.
  const orders = o.processed.map(processedOrder);
  const corrupt = [
    ...o.partitionStates.flatMap((p, index) =>
      corruptEntries({ [keys.appliedSeq]: p.appliedSeqs, ...p.counters, [keys.stats]: p.stats, [keys.applyCount]: p.applyCounts }, p.parked).map((entry) =>
        o.partitionCount > 1 ? `partition ${index}: ${entry}` : entry,
      ),
    ),
    ...o.events.flatMap((e, i) => (orders[i] === 'corrupt' ? [`${keys.processed} ${e.event_id} is not the JSON the consumer writes`] : [])),
  ];

  // A seq Redis applied as an event the store no longer holds (see `takenSeqs`): the store is behind
  // Redis, and its event there is not lost but would be skipped, however often it is republished.
  const taken = takenSeqs(o);
  const takenIds = new Set(taken.map((e) => e.event_id));
  // Lost: PUBLISHED, not applied and in no list we read; confirmed by one atomic look, since the
  // list reads can miss a message that moves meanwhile.
  // (A dead-lettered event is not lost: it waits in the dead-letter list for `dead-letter retry`.)
  let lost = unaccounted(o, takenIds);
  if (lost.length > 0 && lost.length <= MAX_LOST_LOOKUP) {
    const nowhere = new Set(await lostNow(db, redis, lost.map((e) => e.event_id)));
    lost = lost.filter((e) => nowhere.has(e.event_id));
  }
  const lostIds = lost.map((e) => e.event_id);
  // The per-event evidence, kept in the same step as the effect: more than 1 is a double effect.
  const appliedTwice = o.events.flatMap(({ event_id: id, aggregate_id }) =>
    Number(o.applyCounts[id] ?? 0) > 1 ? [`${id} (${o.applyCounts[id]} times${o.partitionCount > 1 ? `, partition ${partitionOf(aggregate_id, o.partitionCount)}` : ''})`] : [],
  );
  // With partitions, any one that serves no store: the relay rebuilds only those.
  const unserved = o.partitionStates.flatMap((p, index) => (p.meta.store === undefined ? [index] : []));
  const redisStateLost = unserved.length > 0 && (await db.hasPublished());
  const unrecoverable = o.partitionStates.reduce((n, p) => n + Number(p.meta.unrecoverable ?? 0), 0);
  // A store that went back in time (a restored backup): its new events would be skipped as the lost ones' duplicates.
  const ahead = await partitionsAhead(partitionsOf(redis), db.history);
  const overtaken = aggregatesPastStore(o);
  const behind = [
    ...new Set([...ahead.map((a) => a.index), ...[...taken.map((e) => e.aggregate_id), ...overtaken.map((a) => a.aggregate)].map((aggregate) => partitionOf(aggregate, o.partitionCount))]),
  ].sort((a, b) => a - b);
  // Pruned seqs an aggregate's applied seq no longer reaches while its partition kept its meta hash
  // (Redis restored from an older copy after a prune): their effects are gone, and nothing rebuilds them.
  // Where the event right after the pruned ones was applied, or the last pruned one's processed
  // entry is still there, they were applied: only the applied seq was lost (seqBehind below).
  const seqsApplied = seqsAppliedByAggregate(o);
  // Past the aggregate horizon an idle aggregate has no guard: its last event's commit time shows it.
  const lastAtOf = new Map(o.aggregates.map((a) => [a.key, a.lastAt]));
  const dropped = (key: string) => o.appliedSeqs[key] === undefined && guardDropped(lastAtOf.get(key) ?? 0, o.windows[partitionOf(key, o.partitionCount)]);
  const prunedAhead = o.prunedThrough.filter(({ key, throughSeq }) => {
    if (dropped(key)) return false;
    const applied = Number(o.appliedSeqs[key] ?? 0);
    return Number.isSafeInteger(applied) && applied < throughSeq && servedPartition(o, key) && !seqsApplied.get(key)?.has(throughSeq + 1);
  });
  const prunedThroughApplied = await prunedSeqsApplied(redis, o, prunedAhead);
  // In the candidates' order (outbox_pruned's), not the processed hash's.
  const prunedApplied = new Set(prunedAhead.flatMap(({ key, throughSeq }) => (prunedThroughApplied.get(key) === throughSeq ? [key] : [])));
  const prunedBehind = prunedAhead
    .filter(({ key }) => !prunedApplied.has(key))
    .map(({ key, throughSeq, events }) => ({
      aggregate: key,
      fromSeq: Math.max(Number(o.appliedSeqs[key] ?? 0), throughSeq - events, prunedThroughApplied.get(key) ?? 0) + 1,
      throughSeq,
    }));
  const prunedLost = prunedBehind.reduce((n, p) => n + p.throughSeq - p.fromSeq + 1, 0);
  const seqBehind = appliedSeqsBehind(o, seqsApplied, prunedApplied);
  const behindKeys = new Set(seqBehind.map((a) => a.aggregate));
  const releasable = await releasableParked(redis, o);
  // In database mode the effects are in the consumer's database, each with its inbox row, pruned
  // events' too: Redis losing their record (a rebuild, an older copy) lost no effect of those. Redis's
  // processed entries then lack the pruned events it lost, the rebuild's count and the older copy's.
  const inboxed = options.consumer === undefined ? undefined : prunedWithInboxRow(options.consumer, o.prunedThrough);
  const effectsLost = inboxed === undefined ? unrecoverable + prunedLost : inboxed.missing;
  const processedForgotten = inboxed === undefined ? 0 : unrecoverable + prunedLost;
  const disordered = outOfOrder(o.events, orders);

  // At the instant each applied seq was read: the snapshot's last seqs, raised by the newer events applied by then.
  const newerSeq = new Map<string, number>();
  o.newer.forEach((e, i) => {
    if (!appliedBy(o.processedNewer[i], seqCounterOf(o, e.aggregate_id))) return;
    newerSeq.set(e.aggregate_id, Math.max(newerSeq.get(e.aggregate_id) ?? 0, e.seq));
  });
  const seqMismatch = o.aggregates
    .filter((a) => Number(o.appliedSeqs[a.key] ?? 0) !== Math.max(a.lastSeq, newerSeq.get(a.key) ?? 0) && !(dropped(a.key) && !newerSeq.has(a.key)))
    .map((a) => a.key);
  // Processed entries at that instant, and those the window's sweeps dropped by then (counted in the
  // same step), less the newer events': the snapshot's events and the pruned ones.
  const swept = o.partitionStates.reduce((n, p) => n + p.window.sweptEvents, 0);
  const processedUnique = o.processedCount + swept - newerApplied.length;
  const sweptLabel = swept > 0 ? ' + swept' : '';
  const forgottenLabel = processedForgotten > 0 ? ' - pruned whose record Redis lost' : '';

  const checks: InvariantCheck[] = [
    {
      name: 'the store is not behind Redis',
      expected: 'yes',
      actual: behind.length > 0 ? 'no' : 'yes',
      status: behind.length > 0 ? 'FAIL' : 'ok',
      examples:
        behind.length > 0
          ? [
              ...ahead.map(({ index, error }) => (o.partitionCount > 1 ? `partition ${index}: ` : '') + error.message),
              ...overtaken
                .slice(0, EXAMPLES)
                .map(
                  (a) =>
                    `${a.aggregate}${inPartition(o, a.aggregate)}: Redis applied it through seq ${a.applied}, the store holds it through seq ${a.last} (restored from an older backup or dump?): its next event would be skipped as a duplicate; outbox verify --repair rebuilds Redis from the store (stop the apps first)`,
                ),
              ...taken
                .slice(0, EXAMPLES)
                .map(
                  (e) =>
                    `${e.aggregate_id} seq ${e.seq}${inPartition(o, e.aggregate_id)}: Redis applied another event at that seq, which the store no longer holds, so ${e.event_id} would be skipped as its duplicate (restored from an older backup or dump?): outbox verify --repair rebuilds Redis from the store (stop the apps first)`,
                ),
            ]
          : undefined,
    },
    {
      name: 'Redis serves this store',
      expected: 'yes',
      actual: redisStateLost ? 'no: Redis lost its state' : unserved.length > 0 ? 'not yet (nothing published)' : 'yes',
      status: redisStateLost ? 'FAIL' : 'ok',
      examples: redisStateLost
        ? [
            ...(o.partitionCount > 1 ? [`partition${unserved.length > 1 ? 's' : ''} ${unserved.join(', ')}`] : []),
            `the relay rebuilds it from ${db.producer.store === 'postgres' ? 'PostgreSQL' : 'SQLite'} on its next pass; by hand: outbox verify --repair`,
          ]
        : undefined,
    },
    inboxed === undefined
      ? check('pruned events Redis lost (effects cannot be rebuilt)', 0, effectsLost, [
          ...prunedBehind.slice(0, EXAMPLES).map((p) => `${p.aggregate} seq ${p.fromSeq}-${p.throughSeq}${inPartition(o, p.aggregate)}: applied seq behind the prune (verify --repair gives it its pruned seq)`),
          ...(unrecoverable > 0 ? await db.prunedAggregates(EXAMPLES) : []),
        ])
      : check('pruned events without an inbox row (effects lost)', 0, effectsLost, [
          ...inboxed.examples,
          ...prunedBehind.slice(0, EXAMPLES).map((p) => `${p.aggregate} seq ${p.fromSeq}-${p.throughSeq}${inPartition(o, p.aggregate)}: applied seq behind the prune (verify --repair gives it its pruned seq)`),
        ]),
    check('PENDING outbox rows', 0, o.pending.length, o.pending.map((id) => `row ${id}`)),
    check(
      o.pruned > 0
        ? `processed_unique${sweptLabel} = outbox rows + pruned${forgottenLabel}`
        : `processed_unique${sweptLabel} = outbox rows`,
      eventIds.length + o.pruned - processedForgotten,
      processedUnique,
    ),
    check('events lost (never applied, not in Redis)', 0, lostIds.length, lost.map((e) => e.event_id + inPartition(o, e.aggregate_id))),
    check('events applied more than once', 0, appliedTwice.length, appliedTwice),
    check('aggregates applied out of seq order', 0, disordered.length, disordered),
    check('aggregates whose applied seq != last seq', 0, seqMismatch.length, [
      ...seqBehind.map(
        (a) =>
          `${a.aggregate}${inPartition(o, a.aggregate)}: applied seq ${a.appliedSeq} in Redis, its events applied through seq ${a.throughSeq} (their processed entries): its next events wait, parked, for seqs applied already; outbox verify --repair raises it`,
      ),
      ...seqMismatch.filter((a) => !behindKeys.has(a)).map((a) => a + inPartition(o, a)),
    ]),
    check(
      'parked events (waiting for a gap)',
      0,
      parkedOfSnapshot,
      releasable.map((field) => `${field}${inPartition(o, field.slice(0, field.lastIndexOf(':')))}: its aggregate's applied seq has reached the seq before it, it waits for nothing; outbox verify --repair queues it again`),
    ),
    check('corrupt entries in Redis (not a number / not JSON)', 0, corrupt.length, corrupt),
  ];
  if (options.checks) {
    checks.push(
      ...(await runCheckSet(
        options.checks,
        {
          ...db.producer,
          consumer: options.consumer,
          // With partitions, partition 0's connection; `counters` are summed over every partition.
          redis: partitionsOf(redis).clients[0],
          counters: o.counters,
          pastHorizon: o.newerInSnapshot.map((e) => e.event),
          appliedPastHorizon: newerApplied.map((e) => e.event),
          inFlight: inFlightOf(o).length,
          newerInFlight: settle.newerInFlight,
        },
        o.producerSnapshot,
        options.onCheckError,
      )),
    );
  }
  const windowMs = o.windows.find((w) => w.windowMs !== null)?.windowMs ?? null;
  if (windowMs !== null || swept > 0) {
    // Beyond the window an applied event keeps no processed entry nor apply count: its seq guard shows it applied.
    checks.push({
      name: `records swept by the dedupe window${windowMs === null ? '' : ` (${windowText(windowMs)})`}`,
      expected: '-',
      actual: `${swept} events, applied per their seq guard`,
      status: 'info',
    });
  }
  checks.push(
    { name: 'dead-lettered entries', expected: '-', actual: String(o.dead), status: 'info' },
    { name: 'still queued / in processing lists', expected: '-', actual: `${o.flight.queued} / ${o.flight.processing}`, status: 'info' },
  );
  if (settle.inFlight > 0) {
    checks.push({
      name: `in flight at the snapshot / applied within ${formatDuration(settle.windowMs)}`,
      expected: '-',
      actual: `${settle.inFlight} / ${settle.cleared}`,
      status: 'info',
    });
  }
  if (settle.newerInFlight > 0) {
    checks.push({ name: 'newer events in flight (after the snapshot, not judged)', expected: '-', actual: String(settle.newerInFlight), status: 'info' });
  }
  return {
    checks,
    lost: lostIds,
    settle,
    figures: {
      outbox: eventIds.length,
      pruned: o.pruned,
      processedUnique,
      swept,
      sweptInSnapshot: o.swept.filter(Boolean).length,
      lost: lostIds.length,
      outOfOrder: disordered.length,
      appliedTwice: appliedTwice.length,
      parked: parkedOfSnapshot,
      deadLettered: o.dead,
      inFlight: o.flight.queued + o.flight.processing,
      redisStateLost,
      unrecoverable,
      ahead: behind,
      prunedBehind,
      seqBehind,
      releasable,
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
