import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import type { InvariantCheck, VerifyCheckSet } from '../../outbox/verify/verify-checks.js';
import { sleep } from '../../outbox/sleep.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { observe, stillInFlight, verifyReadsOf, type VerifyReads } from './observe.js';
import type { AppliedSeqBehind, PrunedBehind } from './findings.js';
import { judge, lostNow, MAX_LOST_LOOKUP } from './ledger.js';

export type { InvariantCheck } from '../../outbox/verify/verify-checks.js';
export type { AppliedSeqBehind, PrunedBehind } from './findings.js';

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

const POLL_MS = 100;
/** How often a settle checks whether what it waits for is lost rather than in flight. */
const LOST_CHECK_MS = 1000;

/**
 * Reconciles the outbox store (SQLite or PostgreSQL, the source of truth) with what the consumer applied in Redis, at any time.
 *
 * It takes a snapshot (see `observe` for the order of the reads), streamed in chunks so that its
 * memory does not grow with history and no Redis call it makes holds Redis long. Events committed
 * after it are not judged, but the effects Redis applied from them are accounted for, so traffic
 * never shows as a mismatch. What the snapshot held must be applied: an event PENDING or not
 * applied yet is in flight, and with `settleMs` verify waits (polling only those events) until
 * every one was applied or the window ended, then looks again with the same horizon and judges that
 * look. A lost event (never applied, in no list) does not become applied, so it fails after the
 * window, named.
 */
export async function verifyStores(store: Db | VerifyReads, redis: Redis | Partitions, options: VerifyOptions = {}): Promise<Ledger> {
  const db = verifyReadsOf(store);
  const windowMs = options.settleMs ?? 0;
  const checkSet = options.checks;
  const look = (horizon?: number, scanLists = false) => observe(db, redis, horizon, checkSet, scanLists, options.consumer);
  let o = await look();
  // The window starts once the snapshot was judged: a look over a long history takes a while itself.
  const started = performance.now();
  const deadline = started + windowMs;
  const atSnapshot = o.findings.inFlight;
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
      o = await look(o.horizon);
      waiting = o.findings.inFlight;
      fresh = true;
    }
  }
  if (!fresh) {
    o = await look(o.horizon);
    waiting = o.findings.inFlight;
  }
  // Above MAX_LOST_LOOKUP unaccounted events there is no atomic look at each one: the snapshot is
  // taken again with every processing list a SCAN finds, as a list no take recorded may hold them.
  if (o.findings.unaccounted.length > MAX_LOST_LOOKUP) {
    o = await look(o.horizon, true);
    waiting = o.findings.inFlight;
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
