import type { Redis } from 'ioredis';
import { toMessage } from '../../outbox/store/events.js';
import { keys } from '../../outbox/redis/keys.js';
import { readEnvelope } from '../../outbox/redis/envelope.js';
import { EXAMPLES, invariantCheck as check, type InvariantCheck } from '../../outbox/verify/verify-checks.js';
import { formatDuration } from '../../outbox/duration.js';
import { partitionOf, partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import { partitionsAhead } from '../../outbox/relay/store-pairing.js';
import { runCheckSet } from './run-check-set.js';
import { idOfEnvelope, INTEGER } from './consumer-state.js';
import { corruptField, appliedBy } from './judge-stream.js';
import { judgePrunedCandidates, releasableParked } from './after-stream.js';
import { whereIs } from './where-is.js';
import type { Observation } from './observe.js';
import type { VerifyReads } from './store-snapshot.js';
import type { Ledger, SettleFigures, VerifyOptions } from './verify.js';

/** Above this many candidates the atomic look (LPOS per list and event) is skipped: they count as not confirmed. */
export const MAX_LOST_LOOKUP = 500;

/** " (partition <i>)" after what names a Redis-side problem, with partitions; '' with one. */
function inPartition(o: Observation, aggregate: string): string {
  return o.partitionCount > 1 ? ` (partition ${partitionOf(aggregate, o.partitionCount)})` : '';
}

/**
 * Of `eventIds`, those PUBLISHED, not applied and in no list nor parked, in one atomic look: lost,
 * not in flight (the list reads of a snapshot can miss a message that moves meanwhile; this cannot).
 */
export async function lostNow(db: VerifyReads, redis: Redis | Partitions, eventIds: string[]): Promise<string[]> {
  if (eventIds.length === 0 || eventIds.length > MAX_LOST_LOOKUP) return [];
  const rows = await db.publishedRowsOf(eventIds);
  if (rows.length === 0) return [];
  const storeId = await db.storeId();
  return whereIs(redis, rows.map((row) => ({ ...row, message: toMessage(row, storeId) })));
}

/** Fields of the small hashes (the check set's counters, stats) where a count belongs but Redis holds something else, and parked entries that are not JSON. */
function corruptSmallHashes(o: Observation): string[] {
  return o.partitionStates.flatMap((p, index) => {
    const found: string[] = [];
    for (const [key, hash] of Object.entries({ ...p.counters, [keys.stats]: p.stats })) {
      for (const [field, value] of Object.entries(hash)) if (!INTEGER.test(value)) found.push(corruptField(o.partitionCount, index, key, field, value));
    }
    for (const [field, value] of Object.entries(p.parked)) {
      if (readEnvelope(value) === undefined) found.push(`${o.partitionCount > 1 ? `partition ${index}: ` : ''}${keys.parked} ${field} is not a parked entry`);
    }
    return found;
  });
}

/** A window as the setting is written: 7d, 2h, 30m, 10s, or ms. */
function windowText(ms: number): string {
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** Judges a look: its findings as the rows of verify's table, and what --repair works on. */
export async function judge(db: VerifyReads, redis: Redis | Partitions, o: Observation, settle: SettleFigures, options: VerifyOptions): Promise<Ledger> {
  const f = o.findings;
  const partitions = partitionsOf(redis);
  const newerApplied = o.newer.filter((e, i) => appliedBy(o.processedNewer[i], o.appliedCounters[partitionOf(e.aggregate_id, o.partitionCount)]));
  const newerIds = new Set(o.newer.map((e) => e.event_id));
  const parkedOfSnapshot = Object.values(o.parked).filter((envelope) => {
    const id = idOfEnvelope(envelope);
    return id === undefined || !newerIds.has(id);
  }).length;
  const corrupt = [...corruptSmallHashes(o), ...f.corrupt.samples];
  const corruptCount = corrupt.length - f.corrupt.samples.length + f.corrupt.count;
  // Lost: PUBLISHED, not applied and in no list we read; confirmed by one atomic look, since the
  // list reads can miss a message that moves meanwhile.
  // (A dead-lettered event is not lost: it waits in the dead-letter list for `dead-letter retry`.)
  let lost = f.unaccounted;
  if (lost.length > 0 && lost.length <= MAX_LOST_LOOKUP) {
    const nowhere = new Set(await lostNow(db, redis, lost.map((e) => e.event_id)));
    lost = lost.filter((e) => nowhere.has(e.event_id));
  }
  const lostIds = lost.map((e) => e.event_id);
  // With partitions, any one that serves no store: the relay rebuilds only those.
  const unserved = o.partitionStates.flatMap((p, index) => (p.meta.store === undefined ? [index] : []));
  const redisStateLost = unserved.length > 0 && (await db.hasPublished());
  const unrecoverable = o.partitionStates.reduce((n, p) => n + Number(p.meta.unrecoverable ?? 0), 0);
  // A store that went back in time (a restored backup): its new events would be skipped as the lost ones' duplicates.
  const ahead = await partitionsAhead(partitions, db.history);
  const behind = [...new Set([...ahead.map((a) => a.index), ...f.behindPartitions])].sort((a, b) => a - b);
  // Pruned seqs a guard no longer reaches while its partition kept its meta hash (Redis restored from
  // an older copy after a prune): their effects are gone. Where the pruned prefix's last processed
  // entry is still there, they were applied: only the guard was lost (seqBehind).
  const prunedBehind = await judgePrunedCandidates(partitions, o.appliedCounters, f);
  const prunedLost = prunedBehind.reduce((n, p) => n + p.throughSeq - p.fromSeq + 1, 0);
  const seqBehind = f.seqBehind;
  const behindKeys = new Set(seqBehind.map((a) => a.aggregate));
  const releasable = await releasableParked(partitions, o.partitionStates.map((p) => p.parked), o.partitionStates.map((p) => p.meta.store !== undefined));
  // In database mode the effects are in the consumer's database, each with its inbox row, pruned
  // events' too: Redis losing their record (a rebuild, an older copy) lost no effect of those.
  const inboxed = o.inboxed;
  const effectsLost = inboxed === undefined ? unrecoverable + prunedLost : inboxed.missing;
  const processedForgotten = inboxed === undefined ? 0 : unrecoverable + prunedLost;
  // Processed entries at the MULTI, and those the window's sweeps dropped by then (counted in the
  // same step), less the newer events': the snapshot's events and the pruned ones.
  const swept = o.partitionStates.reduce((n, p) => n + p.window.sweptEvents, 0);
  const processedUnique = o.processedCount + swept - newerApplied.length;
  const sweptLabel = swept > 0 ? ' + swept' : '';
  const forgottenLabel = processedForgotten > 0 ? ' - pruned whose record Redis lost' : '';
  const repairNote = 'outbox verify --repair rebuilds Redis from the store (stop the apps first)';
  const prunedExamples = prunedBehind
    .slice(0, EXAMPLES)
    .map((p) => `${p.aggregate} seq ${p.fromSeq}-${p.throughSeq}${inPartition(o, p.aggregate)}: applied seq behind the prune (verify --repair gives it its pruned seq)`);

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
              ...f.overtaken.samples.map(
                (a) =>
                  `${a.aggregate}${inPartition(o, a.aggregate)}: Redis applied it through seq ${a.applied}, the store holds it through seq ${a.last} (restored from an older backup or dump?): its next event would be skipped as a duplicate; ${repairNote}`,
              ),
              ...f.taken.samples.map(
                (e) =>
                  `${e.aggregate_id} seq ${e.seq}${inPartition(o, e.aggregate_id)}: Redis applied another event at that seq, which the store no longer holds, so ${e.event_id} would be skipped as its duplicate (restored from an older backup or dump?): ${repairNote}`,
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
      ? check('pruned events Redis lost (effects cannot be rebuilt)', 0, effectsLost, [...prunedExamples, ...(unrecoverable > 0 ? await db.prunedAggregates(EXAMPLES) : [])])
      : check('pruned events without an inbox row (effects lost)', 0, effectsLost, [...inboxed.examples, ...prunedExamples]),
    check('PENDING outbox rows', 0, o.pending, o.pendingExamples.map((id) => `row ${id}`)),
    check(
      o.pruned > 0 ? `processed_unique${sweptLabel} = outbox rows + pruned${forgottenLabel}` : `processed_unique${sweptLabel} = outbox rows`,
      f.events + o.pruned - processedForgotten,
      processedUnique,
    ),
    check('events lost (never applied, not in Redis)', 0, lostIds.length, lost.slice(0, EXAMPLES).map((e) => e.event_id + inPartition(o, e.aggregate_id))),
    check('events applied more than once', 0, f.appliedTwice.count, f.appliedTwice.samples),
    check('aggregates applied out of seq order', 0, f.disordered.count, f.disordered.samples),
    check('aggregates whose applied seq != last seq', 0, f.seqMismatch.count, [
      ...seqBehind
        .slice(0, EXAMPLES)
        .map(
          (a) =>
            `${a.aggregate}${inPartition(o, a.aggregate)}: applied seq ${a.appliedSeq} in Redis, its events applied through seq ${a.throughSeq} (their processed entries): its next events wait, parked, for seqs applied already; outbox verify --repair raises it`,
        ),
      ...f.seqMismatch.samples.filter((a) => !behindKeys.has(a)).map((a) => a + inPartition(o, a)),
    ]),
    check(
      'parked events (waiting for a gap)',
      0,
      parkedOfSnapshot,
      releasable
        .slice(0, EXAMPLES)
        .map((field) => `${field}${inPartition(o, field.slice(0, field.lastIndexOf(':')))}: its aggregate's applied seq has reached the seq before it, it waits for nothing; outbox verify --repair queues it again`),
    ),
    check('corrupt entries in Redis (not a number / not JSON)', 0, corruptCount, corrupt),
  ];
  checks.push(...(await checkSetRows(db, partitions, o, settle, options, newerApplied)));
  checks.push(...infoRows(o, settle, swept));
  return {
    checks,
    lost: lostIds,
    settle,
    figures: {
      outbox: f.events,
      pruned: o.pruned,
      processedUnique,
      swept,
      sweptInSnapshot: f.sweptInSnapshot,
      lost: lostIds.length,
      outOfOrder: f.disordered.count,
      appliedTwice: f.appliedTwice.count,
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

/** The rows that never fail: what the window swept, dead letters, what is queued, and the settle's figures. */
function infoRows(o: Observation, settle: SettleFigures, swept: number): InvariantCheck[] {
  const checks: InvariantCheck[] = [];
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
  return checks;
}

/** The check set's rows (none without one), on the look verify judges. */
async function checkSetRows(db: VerifyReads, partitions: Partitions, o: Observation, settle: SettleFigures, options: VerifyOptions, newerApplied: Observation['newer']): Promise<InvariantCheck[]> {
  if (!options.checks) return [];
  return runCheckSet(
    options.checks,
    {
      ...db.producer,
      consumer: options.consumer,
      // With partitions, partition 0's connection; `counters` are summed over every partition.
      redis: partitions.clients[0],
      counters: o.counters,
      pastHorizon: o.newerInSnapshot.map((e) => e.event),
      appliedPastHorizon: newerApplied.map((e) => e.event),
      inFlight: o.findings.inFlight.length,
      newerInFlight: settle.newerInFlight,
    },
    o.producerSnapshot,
    options.onCheckError,
  );
}
