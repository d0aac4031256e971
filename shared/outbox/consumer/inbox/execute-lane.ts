import type { Redis } from 'ioredis';
import { crashPoint } from '../../crash-point.js';
import type { Db } from '../../store/open-database.js';
import type { OutboxEvent } from '../../store/events.js';
import { claimEvents, completeEvents, deadLetter, handlerFailed, type ClaimOutcome, type CompleteOutcome, type EventToClaim } from '../../redis/scripts.js';
import { backoffMs } from '../retries.js';
import { applyBatchInDatabase } from './apply-in-database.js';
import type { Delivery } from './database-handlers.js';

/** What became of an event in database mode. 'busy': another process's claim holds it; it waits for that lease. */
export type InboxOutcome = Exclude<ClaimOutcome, 'claimed'> | CompleteOutcome | 'dead' | 'retry';

/** One delivered event of a lane and what became of it. */
export interface InboxItem {
  /** The message exactly as it sits in the processing list. */
  raw: string;
  event: OutboxEvent;
  /** The number of this attempt at the event (1 = first); after a failed one, the failed attempts counted. */
  attempt: number;
  outcome?: InboxOutcome;
  /** Why it was dead-lettered, or the handler's error when it waits for a retry. */
  reason?: string;
  /** When it waits (a retry, or another process's lease): in how many ms. */
  retryInMs?: number;
  /** Its handler failed this attempt (retried or dead-lettered): counted in `failed`. */
  handlerFailed?: true;
}

export interface InboxContext {
  redis: Redis;
  processingList: string;
  db: Db;
  /** The handler and the event as it gets it, or why the event is poison (see `deliverByType`). */
  deliver: (event: OutboxEvent) => Delivery;
  /** This process's claim token: its own claims it may take again at once (a retry after a failed attempt). */
  owner: string;
  leaseMs: number;
  markerTtlSeconds: number;
  maxAttempts: number;
  onProblem?: (problem: string) => void;
}

/** Events per claim or complete script call, as apply-events. */
const CHUNK = 200;

/** The opaque aggregate key (brief decision 1): the applied-seq field and the parked field prefix. */
export function aggregateKeyOf(event: OutboxEvent): string {
  return String(event.aggregateId);
}

/** The lane of an aggregate key: a string hash (FNV-1a), so any key spreads, numeric or not. */
export function laneOf(key: string, lanes: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i += 1) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % lanes;
}

/**
 * Splits a lane into waves: wave k holds the k-th event of each aggregate, in lane order. An
 * aggregate's seq n+1 cannot be claimed before seq n is completed (the claim would park it), so
 * each wave is claimed, handled and completed before the next.
 */
function wavesOf<T extends InboxItem>(items: T[]): T[][] {
  const seen = new Map<string, number>();
  const waves: T[][] = [];
  for (const item of items) {
    const key = aggregateKeyOf(item.event);
    const k = seen.get(key) ?? 0;
    seen.set(key, k + 1);
    (waves[k] ??= []).push(item);
  }
  return waves;
}

function toClaim(item: InboxItem): EventToClaim {
  const { eventId, storeId, seq, createdAt } = item.event;
  return { raw: item.raw, eventId, storeId, aggregate: aggregateKeyOf(item.event), seq, createdAt };
}

/**
 * Database mode for one lane of delivered events: for each, claim (Redis) → crash point
 * `consumer.after-claim` → handler + inbox row in one transaction (one per chunk, a savepoint per
 * event: see applyBatchInDatabase) → COMMIT → crash point
 * `consumer.after-commit` → complete (Redis: processed, applied seq, ack, unpark) → crash point
 * `consumer.after-processed`. A crash anywhere leaves the message in the processing list or
 * completed; a claim left by a dead process expires with its lease; the inbox row keeps a second
 * attempt from applying the effect again. Sets each item's outcome.
 */
export async function executeLane(ctx: InboxContext, items: InboxItem[]): Promise<void> {
  const report = (problems: string[]) => problems.forEach((p) => ctx.onProblem?.(p));
  const handled: Deliverable[] = [];
  for (const item of items) {
    const delivery = ctx.deliver(item.event);
    if ('handler' in delivery) handled.push(Object.assign(item, { delivery }));
    // Poison, not a failure: no attempt would handle it (no handler, a payload its schema refuses).
    else await poison(ctx, item, delivery.poison);
  }
  for (const wave of wavesOf(handled)) {
    for (let i = 0; i < wave.length; i += CHUNK) await executeChunk(ctx, wave.slice(i, i + CHUNK), report);
  }
}

async function poison(ctx: InboxContext, item: InboxItem, reason: string): Promise<void> {
  item.reason = reason;
  item.outcome = (await deadLetter(ctx.redis, ctx.processingList, item.raw, reason)) ? 'dead' : 'stale';
}

/** A handler's error that no attempt would get past (the public API's PoisonEventError, matched by name). */
function isPoison(error: unknown): error is Error {
  return error instanceof Error && error.name === 'PoisonEventError';
}

type Deliverable = InboxItem & { delivery: Extract<Delivery, { handler: unknown }> };

async function executeChunk(ctx: InboxContext, chunk: Deliverable[], report: (problems: string[]) => void): Promise<void> {
  const claim = await claimEvents(ctx.redis, ctx.processingList, chunk.map(toClaim), ctx.leaseMs, ctx.owner);
  report(claim.problems);
  const claimed: Deliverable[] = [];
  chunk.forEach((item, i) => {
    const outcome = claim.outcomes[i];
    if (outcome === 'claimed') claimed.push(item);
    else item.outcome = outcome;
    // Retried once the lease runs out (a few ms later at least, so that a lease about to expire is not hammered).
    if (outcome === 'busy') item.retryInMs = Math.max(10, claim.waits[i]);
  });
  if (claimed.length === 0) return;
  crashPoint('consumer.after-claim', () => `crash point consumer.after-claim: dying with ${claimed.length} events claimed`);

  const committed: InboxItem[] = [];
  const failed: { item: InboxItem; error: string }[] = [];
  const poisoned: { item: InboxItem; error: string }[] = [];
  const results = applyBatchInDatabase(
    ctx.db,
    claimed.map((item) => ({ event: item.event, run: (db) => item.delivery.handler(item.delivery.delivered as never, db) })),
  );
  claimed.forEach((item, i) => {
    const result = results[i];
    if (typeof result === 'string') committed.push(item);
    else (isPoison(result.error) ? poisoned : failed).push({ item, error: result.error instanceof Error ? result.error.message : String(result.error) });
  });
  if (committed.length > 0) crashPoint('consumer.after-commit', () => `crash point consumer.after-commit: dying with ${committed.length} events committed`);

  await Promise.all([
    ...poisoned.map(({ item, error }) => poison(ctx, item, error)),
    ...failed.map(async ({ item, error }) => {
      // Rolled back: a failed attempt, counted like the engine's. The claim stays ours, so the retry re-claims at once.
      const { status, attempts } = await handlerFailed(ctx.redis, ctx.processingList, item.raw, item.event.eventId, ctx.maxAttempts, error);
      item.outcome = status;
      item.handlerFailed = true;
      item.attempt = attempts;
      item.reason = status === 'dead' ? `handler failed ${attempts} times: ${error}` : error;
      if (status === 'retry') item.retryInMs = backoffMs(attempts);
    }),
    (async () => {
      if (committed.length === 0) return;
      const events = committed.map((item) => ({
        ...toClaim(item),
        result: JSON.stringify({ type: item.event.type, aggregateId: item.event.aggregateId, seq: item.event.seq, inbox: true }),
      }));
      const { outcomes, problems } = await completeEvents(ctx.redis, ctx.processingList, events, ctx.markerTtlSeconds);
      report(problems);
      committed.forEach((item, i) => (item.outcome = outcomes[i]));
      crashPoint('consumer.after-processed', () => `crash point consumer.after-processed: dying after ${committed.length} events were completed`);
    })(),
  ]);
}
