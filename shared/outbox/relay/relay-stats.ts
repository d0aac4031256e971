import type { Logger } from '../logger.js';
import { deltaSince, everyInterval } from '../stats-interval.js';

/**
 * How a relay pass (one BullMQ job's slice) ended: `ok` (whatever it relayed, none included),
 * `no-database` (no live app.db), `store-mismatch` (Redis serves another store), `write-blocked`
 * (app.db refused the writes of its pairing), `lock-lost` (another relay took the job over),
 * `stopped` (the app is stopping), `failed` (an error; the job failed).
 */
export type PassOutcome = 'ok' | 'no-database' | 'store-mismatch' | 'write-blocked' | 'lock-lost' | 'stopped' | 'failed';

export interface PassRecord {
  startedAt: number;
  endedAt: number;
  outcome: PassOutcome;
  events: number;
  batches: number;
  reason?: string;
}

export interface RelayCounters {
  /** Events pushed and marked PUBLISHED (a batch re-pushed after a crash counts again). */
  relayed: number;
  batches: number;
  passes: number;
  /** Passes that did not end `ok` or `stopped`, plus incidents of app.db refusing the relay's writes. */
  errors: number;
}

/** The relay app's own numbers: what its health endpoint and its `relay stats` line report. */
export function createRelayStats() {
  const counters: RelayCounters = { relayed: 0, batches: 0, passes: 0, errors: 0 };
  let lastPass: PassRecord | null = null;
  let runningSince: number | null = null;
  let blocked: { since: number; cause: string } | null = null;

  return {
    counters,
    /** Counters changed since the previous call: the `relay stats` line's interval. */
    interval: deltaSince(counters),
    passStarted(): void {
      runningSince = Date.now();
    },
    batchRelayed(count: number): void {
      counters.relayed += count;
      counters.batches += 1;
    },
    passEnded(outcome: PassOutcome, result: { events: number; batches: number }, reason?: string): void {
      const now = Date.now();
      lastPass = { startedAt: runningSince ?? now, endedAt: now, outcome, events: result.events, batches: result.batches, ...(reason ? { reason } : {}) };
      runningSince = null;
      counters.passes += 1;
      if (outcome !== 'ok' && outcome !== 'stopped') counters.errors += 1;
    },
    /** app.db refuses the relay's writes (locked, full): counted once per incident. */
    blockedBy(cause: string): void {
      if (blocked?.cause === cause) return;
      blocked = { since: Date.now(), cause };
      counters.errors += 1;
    },
    unblocked(): void {
      blocked = null;
    },
    snapshot(now = Date.now()) {
      return {
        ...counters,
        lastPass: lastPass && { ...lastPass, ageMs: now - lastPass.endedAt },
        running: runningSince === null ? null : { startedAt: runningSince, forMs: now - runningSince },
        blocked: blocked && { ...blocked, forMs: now - blocked.since },
      };
    },
  };
}

export type RelayStats = ReturnType<typeof createRelayStats>;

/**
 * The relay's `relay stats` line, one per interval at info: what it relayed in the interval, and
 * `lagMs()`, the age of the oldest PENDING row now (read from the store the relay runs on).
 * Returns the function that stops it.
 */
export function startRelayStatsLine(stats: RelayStats, everyMs: number, lagMs: () => number | null | Promise<number | null>, log: Logger): () => void {
  return everyInterval(
    everyMs,
    async () => {
      const { relayed, batches, passes, errors } = stats.interval();
      log.info('relay stats', { relayed, batches, passes, errors, lagMs: await lagMs() });
    },
    log,
  );
}
