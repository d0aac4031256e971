import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import { explainError } from '../errors/explain-error.js';
import { StoreRefusedError } from '../errors/store-refused-error.js';
import { incidentLog } from '../incident-log.js';
import type { Logger } from '../logger.js';
import { keys } from '../redis/keys.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { createRelayStats, startRelayStatsLine, type PassOutcome } from '../relay/relay-stats.js';
import { describePairing } from '../relay/store-pairing.js';
import { sleep } from '../sleep.js';
import { createPgRelay, type PgRelay } from './pg-relay.js';
import { pgStoreIdOf } from './pg-store-meta.js';

export interface PgRelayLoopOptions {
  /** How long one pass relays before it records itself (`outbox:relay:last-run`) and starts the next (ms). Default 1500. */
  sliceMs?: number;
  /** Pause when no unclaimed row is PENDING (ms). Default 5. */
  pollMs?: number;
  /** Rows per batch. Default 1000. */
  batchSize?: number;
  /** Interval of the `relay stats` line (ms; 0 = never). Default 10000. */
  statsEveryMs?: number;
}

/** The first pause after a failed pass, and the longest (ms); it doubles in between. */
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 2000;

/**
 * The relay app on PostgreSQL: a loop of passes, each relaying batch after batch (createPgRelay) for
 * up to `sliceMs`, pausing `pollMs` when nothing was left. No job lock: any number of these run at
 * once, in one process or many, each batch claiming rows no other relay holds (FOR UPDATE SKIP
 * LOCKED). A pass that fails (PostgreSQL or Redis unreachable, Redis serving another store) is
 * logged once per incident and retried after a backoff; its batch stayed PENDING.
 */
export function startPgRelayLoop(pool: Pool, queues: Redis | Partitions, log: Logger, options: PgRelayLoopOptions = {}) {
  const redis = partitionsOf(queues).clients[0];
  const sliceMs = options.sliceMs ?? 1500;
  const pollMs = options.pollMs ?? 5;
  const stats = createRelayStats();
  const newRelay = () =>
    createPgRelay(pool, queues, {
      batchSize: options.batchSize,
      onPairing: (pairing) =>
        pairing.kind === 'rebuilt'
          ? log.warn(describePairing(pairing, 'PostgreSQL'), { republished: pairing.republished, unrecoverable: pairing.unrecoverable })
          : log.info(describePairing(pairing, 'PostgreSQL')),
    });
  // One relay per store: when the outbox tables were recreated (`outbox init --force`), the next
  // pass relays for the new store id, and never claims Redis for the old one.
  let current: { storeId: string; relay: PgRelay } | undefined;
  async function relayOfStore(): Promise<PgRelay> {
    const storeId = await pgStoreIdOf(pool);
    if (current?.storeId !== storeId) {
      if (current) log.warn('the outbox tables were recreated: relaying for the new store', { storeId, was: current.storeId });
      current = { storeId, relay: newRelay() };
    }
    return current.relay;
  }
  const closing = new AbortController();
  const failures = incidentLog(log);

  async function pass(): Promise<{ outcome: PassOutcome; reason?: string }> {
    const started = Date.now();
    stats.passStarted();
    let events = 0;
    let batches = 0;
    try {
      const relay = await relayOfStore();
      // Once a pass, even when nothing is PENDING: notices a Redis that lost its state, or a
      // database that went back in time under it (restored from an older backup).
      await relay.pair();
      while (Date.now() - started < sliceMs && !closing.signal.aborted) {
        const done = await relay.relayAll({
          deadline: started + sliceMs,
          onBatch: (batch) => {
            stats.batchRelayed(batch.count);
            log.debug('batch relayed', { count: batch.count, firstId: batch.firstId, lastId: batch.lastId, durationMs: Number(batch.durationMs.toFixed(2)) });
          },
        });
        events += done.events;
        batches += done.batches;
        if (done.events === 0) await sleep(pollMs, closing.signal);
      }
      await redis.hset(keys.relayLastRun, { at: Date.now(), jobId: `pg:${process.pid}`, events, batches, durationMs: Date.now() - started });
      const outcome = closing.signal.aborted ? 'stopped' : 'ok';
      stats.passEnded(outcome, { events, batches });
      failures.clear();
      return { outcome };
    } catch (error) {
      const reason = explainError(error)?.message ?? (error instanceof Error ? error.message : String(error));
      const outcome = error instanceof StoreRefusedError ? 'store-mismatch' : 'failed';
      stats.passEnded(outcome, { events, batches }, reason);
      failures.warn('relay pass failed', { error: reason });
      return { outcome, reason };
    }
  }

  const running = (async () => {
    let backoffMs = BACKOFF_FIRST_MS;
    while (!closing.signal.aborted) {
      const { outcome } = await pass();
      if (outcome === 'ok' || outcome === 'stopped') backoffMs = BACKOFF_FIRST_MS;
      else {
        await sleep(backoffMs, closing.signal);
        backoffMs = Math.min(backoffMs * 2, BACKOFF_MAX_MS);
      }
    }
  })();

  const stopStats = startRelayStatsLine(stats, options.statsEveryMs ?? 10_000, () => oldestPendingAgeMs(pool).catch(() => null), log);

  return {
    /** This relay's numbers (see `createRelayStats`). */
    stats,
    /** Lets the batch under way commit, then stops. */
    async close(): Promise<void> {
      stopStats();
      closing.abort();
      await running;
    },
  };
}

/** Age of the oldest PENDING row (ms): the relay's lag; 0 when none. */
export async function oldestPendingAgeMs(pool: Pool, now = Date.now()): Promise<number> {
  const { rows } = await pool.query<{ created_at: string }>("SELECT created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1");
  return rows[0] === undefined ? 0 : Math.max(0, now - Number(rows[0].created_at));
}
