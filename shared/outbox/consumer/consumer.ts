import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { OutboxEvent } from '../store/events.js';
import { laneOf } from '../events/aggregate-key.js';
import { keys } from '../redis/keys.js';
import { DEFAULT_DEDUPE_WINDOW_MS, markerTtlOf, sweepWindow } from '../redis/dedupe-window.js';
import { applyEvents, deadLetter, handlerFailed, moveToProcessing, type ApplyOutcome, type EventToApply } from '../redis/scripts.js';
import { readEntry } from './decode-entry.js';
import { driveRounds, takingConnection } from './drive-rounds.js';
import { startHeartbeat } from './heartbeats.js';
import type { EncodedEffect, HandlerResult } from './handler-result.js';
import { backoffMs, createRetryQueue, refusedBackoffMs } from './retries.js';

export interface ConsumerOptions {
  /**
   * Names this consumer's processing list. A consumer started again with the same id handles what
   * its predecessor left there. Default 'cli'.
   */
  consumerId?: string;
  /** Messages taken (LMOVE each, in one script) per round. Default 1000. */
  batchSize?: number;
  /**
   * How long an applied event's records (dedupe marker, processed entry, apply count) are kept, ms.
   * Beyond it the aggregate's seq guard tells a duplicate. Default 7 days (`DEFAULT_DEDUPE_WINDOW_MS`).
   */
  dedupeWindowMs?: number;
  /**
   * Drops the seq guard of an aggregate idle for longer than this, ms (at least the window; longer
   * than any event takes from commit to apply). Default none: guards are kept for good.
   */
  aggregateHorizonMs?: number;
  /**
   * Computes the effects of a task of events, in order (e.g. on a worker pool), given the number of
   * this attempt at each (1 = first). A result `{error}` fails that event's attempt, `{poison}`
   * dead-letters it at once; a rejection (a worker thread lost, a timeout) fails every event of the
   * task. The public `createConsumer` builds it from a handler set.
   */
  handler: (events: OutboxEvent[], attempts: number[]) => HandlerResult[] | Promise<HandlerResult[]>;
  /**
   * Attempts the handler gets at an event: a failed attempt leaves the event in the processing list
   * and tries it again after a backoff; the last one dead-letters it. Default 5.
   */
  maxAttempts?: number;
  /**
   * Told of bad state the apply script met in Redis (a non-number where a count belongs, a corrupt
   * parked entry, an event applied twice); the messages concerned are left or kept, never lost.
   */
  onProblem?: (problem: string) => void;
  /**
   * Lanes a round is split into, by aggregate: lanes run in parallel, the events of one aggregate
   * always in the same lane, in order. Default 1.
   */
  lanes?: number;
  /**
   * Tries again, with a backoff, an event the apply script refused for bad state in Redis (it stays
   * in the processing list meanwhile), so it is applied once an operator fixes the state. The app
   * sets it; a drain leaves such events where they are and ends. Default false.
   */
  retryRefused?: boolean;
}

/** 'retry': the handler failed, the event waits in the processing list for its next attempt. */
export type Outcome = ApplyOutcome | 'dead' | 'retry';

export interface ConsumeStats {
  /** Messages handled, recovered ones included. */
  received: number;
  /** Of those, found in the processing list at start. */
  recovered: number;
  applied: number;
  duplicates: number;
  parked: number;
  dead: number;
  /** Already acked by an earlier call (a re-sent script): nothing done. */
  stale: number;
  /** Refused because Redis holds a non-number where a count belongs: left in the processing list. */
  invalid: number;
  /** Failed handler attempts followed by another attempt (the last failed one dead-letters: `dead`). */
  retried: number;
  /** Failed handler attempts (threw, timed out, lost the thread): `retried` and those that dead-lettered. */
  failed: number;
}

const STAT_OF: Record<Outcome, keyof ConsumeStats> = {
  applied: 'applied',
  duplicate: 'duplicates',
  parked: 'parked',
  dead: 'dead',
  stale: 'stale',
  invalid: 'invalid',
  foreign: 'dead',
  retry: 'retried',
};

export const DEFAULT_MAX_ATTEMPTS = 5;

/** One message of a round and what became of it. */
export interface Handled {
  raw: string | Buffer;
  /** Its bytes as taken, when it was read from them (what the apply script is sent). */
  bytes?: Buffer;
  event?: OutboxEvent;
  /** The number of this attempt at the event (1 = first); after a failed one, the failed attempts counted. */
  attempt?: number;
  /** Why it was dead-lettered, or the handler's error when it waits for a retry. */
  reason?: string;
  /** When it waits for a retry: in how many ms. */
  retryInMs?: number;
  /** Refused for bad state in Redis: how many times in a row (`retryRefused`). */
  refusals?: number;
  outcome?: Outcome;
}

/** Events per apply-events script call: large enough to amortize the round trip, small enough not to stall Redis. */
const APPLY_CHUNK = 200;

export function emptyStats(): ConsumeStats {
  return { received: 0, recovered: 0, applied: 0, duplicates: 0, parked: 0, dead: 0, stale: 0, invalid: 0, retried: 0, failed: 0 };
}

// The processed entry's start per event type (only declared types get here, a handful), made once.
const resultStartOf = new Map<string, string>();

/** What the apply script takes for one event whose handler gave `effects`. */
export function eventToApply(raw: string | Buffer, event: OutboxEvent, effects: EncodedEffect[]): EventToApply {
  const { eventId, storeId, seq, type } = event;
  const aggregate = event.aggregateId;
  let start = resultStartOf.get(type);
  if (start === undefined) {
    start = `{"type":${JSON.stringify(type)},"aggregate":`;
    resultStartOf.set(type, start);
  }
  // The processed entry says what was applied; the script adds applyOrder and appliedAt.
  const result = `${start}${JSON.stringify(aggregate)},"seq":${seq},"effects":${effects.length}}`;
  return { raw, eventId, storeId, aggregate, seq, effects, result, createdAt: event.createdAt, prevCreatedAt: event.prevCreatedAt };
}

/**
 * The idempotent consumer. Every message is first moved to this consumer's own processing list and
 * removed from it only by the same atomic script that applies it, so a crash at any instant leaves
 * it either applied or still in the processing list, never both and never neither.
 *
 * Poison versus failure: a message that cannot be read is dead-lettered at once; an event whose
 * handler failed (threw, timed out, lost its worker thread) stays in the processing list and is
 * tried again after a backoff, its failed attempts counted in `outbox:attempts`, and is
 * dead-lettered only after `maxAttempts`. Meanwhile the seq guard parks the aggregate's later
 * events, and applying it re-queues them in order.
 */
export function createConsumerEngine(redis: Redis, options: ConsumerOptions) {
  const consumerId = options.consumerId ?? 'cli';
  const batchSize = options.batchSize ?? 1000;
  const windowMs = options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS;
  const markerTtlSeconds = markerTtlOf(windowMs);
  const horizonMs = options.aggregateHorizonMs ?? 0;
  const { handler } = options;
  const lanes = Math.max(1, options.lanes ?? 1);
  const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  const processingList = keys.processing(consumerId);
  const waiting = createRetryQueue();
  // Events refused for bad state in Redis that wait to be tried again, and how many times they were.
  const refusedTries = new Map<string, number>();

  /** Dead-letters a message that sits in the processing list. */
  async function reject(raw: string | Buffer, reason: string): Promise<Outcome> {
    return (await deadLetter(redis, processingList, raw, reason)) ? 'dead' : 'stale';
  }

  /** Counts a failed attempt at a message in the processing list; dead-letters it at the last. */
  async function fail(p: Handled, error: string): Promise<Outcome> {
    const { status, attempts } = await handlerFailed(redis, processingList, p.raw as string, p.event!.eventId, maxAttempts, error);
    p.attempt = attempts;
    if (status === 'dead') p.reason = `handler failed ${attempts} times: ${error}`;
    return status;
  }

  /**
   * Runs the handler over `items` (all with an event); resolves one result per item, in order.
   * First attempts run in lanes by aggregate; an event being retried runs in a task of its own, so
   * that an event which keeps killing its thread does not take the attempts of others with it.
   */
  async function runHandlers(items: Handled[]): Promise<HandlerResult[]> {
    const results: HandlerResult[] = new Array(items.length);
    // Each task lists the indexes of its items.
    const tasks = Array.from({ length: lanes }, () => [] as number[]);
    items.forEach((item, index) => {
      if (item.attempt! > 1) tasks.push([index]);
      else tasks[lanes === 1 ? 0 : laneOf(item.event!.aggregateId, lanes)].push(index);
    });
    await Promise.all(
      tasks.map(async (task) => {
        if (task.length === 0) return;
        let taskResults: HandlerResult[];
        try {
          taskResults = await handler(
            task.map((index) => items[index].event!),
            task.map((index) => items[index].attempt!),
          );
        } catch (error) {
          // The whole task is lost (its thread died, it timed out): every event of it failed this attempt.
          taskResults = task.map(() => ({ error: (error as Error).message }));
        }
        task.forEach((index, i) => (results[index] = taskResults[i] ?? { error: 'the handler gave no result for this event' }));
      }),
    );
    return results;
  }

  /** Sets `attempt` on messages read back from the processing list: failed attempts counted in Redis, plus one. */
  async function loadAttempts(items: Handled[]): Promise<void> {
    const withEvent = items.filter((p) => p.event);
    if (withEvent.length === 0) return;
    const counts = await redis.hmget(keys.attempts, ...withEvent.map((p) => p.event!.eventId));
    withEvent.forEach((p, i) => (p.attempt = Number(counts[i] ?? 0) + 1));
  }

  /**
   * Prepares a round of messages and sends, in list order, what it needs: bad ones are
   * dead-lettered one by one, good ones are applied by `applyEvents` in chunks that keep list order
   * (so an aggregate's effects are applied in order). Handlers run in lanes: one after another
   * within an aggregate, in parallel across lanes. Resolves once everything is sent, with
   * `answered` (wrapped, or await would flatten it): each message's outcome, once Redis answered.
   */
  async function sendRound(entries: Buffer[], stats: ConsumeStats, { recovered = false } = {}): Promise<{ answered: Promise<Handled[]> }> {
    // A round's items are its own: they are completed in place (attempt, reason, outcome), not copied.
    const parsed: Handled[] = entries.map((entry) => {
      const read: Handled = readEntry(entry);
      if (read.event) read.attempt = 1;
      return read;
    });
    if (recovered) await loadAttempts(parsed);
    // Events waiting for a retry go first: they were taken before anything in this round.
    const retries: Handled[] = waiting.removeDue(Date.now()).map((w) => ({ raw: w.raw, event: w.event, attempt: w.attempts + 1 }));
    const items = retries.length > 0 ? [...retries, ...parsed] : parsed;
    const valid = items.filter((p) => p.event);
    const results = await runHandlers(valid);
    // Everything below is sent synchronously, so rounds cannot interleave.
    const rejected: Handled[] = [];
    const failed: { item: Handled; error: string }[] = [];
    const applied: Handled[] = [];
    const batch: EventToApply[] = [];
    let next = 0; // `valid` is `items` with an event, in order: results[next] is the current item's
    for (const p of items) {
      if (!p.event) {
        rejected.push(p);
        continue;
      }
      const result = results[next++];
      if ('poison' in result) {
        p.reason = result.poison;
        rejected.push(p);
      } else if ('error' in result) {
        failed.push({ item: p, error: result.error });
      } else {
        applied.push(p);
        batch.push(eventToApply(p.bytes ?? p.raw, p.event, result.effects));
      }
    }
    const sent: Promise<Outcome[]>[] = [
      ...rejected.map((p) => reject(p.raw, p.reason!).then((outcome) => [outcome])),
      ...failed.map(({ item, error }) => fail(item, error).then((outcome) => [outcome])),
    ];
    for (let i = 0; i < batch.length; i += APPLY_CHUNK) {
      sent.push(
        applyEvents(redis, processingList, batch.slice(i, i + APPLY_CHUNK), markerTtlSeconds, horizonMs).then(({ outcomes, problems }) => {
          for (const problem of problems) options.onProblem?.(problem);
          return outcomes;
        }),
      );
    }
    // (Counted now: the answer does not keep the round's entries array. The items' bytes, slices of
    // the take's reply, live until the answer, as the commands that carry them do.)
    const received = entries.length;
    const answered = Promise.all(sent).then((results) => {
      const outcomes = results.flat();
      if (outcomes.length > 0) crashPoint('consumer.after-apply', () => `crash point consumer.after-apply: dying after ${outcomes.length} messages were handled`);
      stats.received += received;
      stats.failed += failed.length;
      for (const outcome of outcomes) stats[STAT_OF[outcome]] += 1;
      for (const { item, error } of failed) item.reason ??= error;
      const handled = [...rejected, ...failed.map((f) => f.item), ...applied];
      handled.forEach((p, i) => (p.outcome = outcomes[i]));
      const now = Date.now();
      for (const p of handled) {
        if (p.event && p.outcome !== 'invalid') refusedTries.delete(p.event.eventId);
        if (p.outcome === 'invalid' && p.event && options.retryRefused) {
          // The same attempt again, later: bad state in Redis is no failure of the handler's.
          const tries = (refusedTries.get(p.event.eventId) ?? 0) + 1;
          refusedTries.set(p.event.eventId, tries);
          p.refusals = tries;
          p.retryInMs = refusedBackoffMs(tries);
          waiting.add({ raw: p.raw.toString(), event: p.event, attempts: p.attempt! - 1, dueAt: now + p.retryInMs });
        }
        if (p.outcome !== 'retry') continue;
        p.retryInMs = backoffMs(p.attempt!);
        waiting.add({ raw: p.raw as string, event: p.event!, attempts: p.attempt!, dueAt: now + p.retryInMs });
      }
      // An acked event's failed attempts were cleared by the apply script, in the same step.
      return handled;
    });
    return { answered };
  }

  /** Moves up to `batchSize` messages into the processing list (LMOVE each, in one script); resolves what was moved. */
  function take(connection: Redis): Promise<Buffer[]> {
    return moveToProcessing(connection, processingList, batchSize);
  }

  const rounds = {
    processingList,
    sendRound,
    take,
    nextRetryInMs: () => waiting.nextDueInMs(Date.now()),
    forgetRetries: () => {
      waiting.clear();
      refusedTries.clear();
    },
    /** Events refused for bad state in Redis, waiting to be tried again (`retryRefused`). */
    refusedWaiting: () => refusedTries.size,
  };

  /**
   * Dispatches what a previous run left in the processing list, then consumes until `outbox.events`
   * is empty and no event waits for a retry: the loop the app runs too (drive-rounds.ts), in its
   * drain mode. Rounds overlap: the next round is taken (on a second connection) while Redis runs
   * the previous round's scripts. An event whose handler failed is tried again in a later round of
   * the same run, after its backoff (waiting for it when nothing else is left), until it is applied
   * or dead-lettered after `maxAttempts`: so a drain always ends, within about the sum of the backoffs.
   */
  async function drain(onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> {
    // Alive while it drains, so that a consumer app does not reclaim this processing list.
    const stopHeartbeat = startHeartbeat(redis, consumerId);
    const stats = emptyStats();
    try {
      await driveRounds(redis, rounds, { until: 'empty', connect: () => takingConnection(redis), stats, onRound: () => onRound?.(stats) }).done;
      // A drain is the CLI's consumer: it sweeps what is due, as the app does on a timer.
      await sweepWindow(redis, windowMs, horizonMs);
      return stats;
    } finally {
      await stopHeartbeat();
    }
  }

  return { consumerId, ...rounds, drain };
}

export type ConsumerEngine = ReturnType<typeof createConsumerEngine>;
