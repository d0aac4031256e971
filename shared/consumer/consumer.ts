import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { OutboxEvent } from '../events.js';
import { MalformedMessageError, parseMessage } from '../parse-message.js';
import { keys } from '../redis/keys.js';
import { applyEvents, deadLetter, defineScripts, take as takeMessages, type ApplyOutcome, type EventToApply } from '../redis/scripts.js';
import { decodeEntry } from './decode-entry.js';
import { startHeartbeat } from './orphans.js';
import { computeEffects, type HandlerResult } from './effect.js';

export interface ConsumerOptions {
  /**
   * Names this consumer's processing list. A consumer started again with the same id handles what
   * its predecessor left there. Default 'cli'.
   */
  consumerId?: string;
  /** Messages taken (LMOVE each, in one script) per round. Default 1000. */
  batchSize?: number;
  /** TTL of the per-event dedupe marker, in seconds; 0 keeps it forever. Default 7 days. */
  dedupeTtlSeconds?: number;
  /**
   * Computes the effects of a lane of events, in order (e.g. on a worker pool). Default:
   * `computeEffects` in this thread.
   */
  handler?: (events: OutboxEvent[]) => HandlerResult[] | Promise<HandlerResult[]>;
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
}

export type Outcome = ApplyOutcome | 'dead';

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
}

const STAT_OF: Record<Outcome, keyof ConsumeStats> = {
  applied: 'applied',
  duplicate: 'duplicates',
  parked: 'parked',
  dead: 'dead',
  stale: 'stale',
  invalid: 'invalid',
  foreign: 'dead',
};

export const DEFAULT_DEDUPE_TTL_SECONDS = 7 * 24 * 3600;

/** One message of a round and what became of it. */
export interface Handled {
  raw: string | Buffer;
  event?: OutboxEvent;
  /** Why it was dead-lettered. */
  reason?: string;
  outcome?: Outcome;
}

/** Events per apply-events script call: large enough to amortize the round trip, small enough not to stall Redis. */
const APPLY_CHUNK = 200;

export function emptyStats(): ConsumeStats {
  return { received: 0, recovered: 0, applied: 0, duplicates: 0, parked: 0, dead: 0, stale: 0, invalid: 0 };
}

/**
 * The idempotent consumer. Every message is first moved to this consumer's own processing list and
 * removed from it only by the same atomic script that applies it, so a crash at any instant leaves
 * it either applied or still in the processing list, never both and never neither.
 */
export function createConsumer(redis: Redis, options: ConsumerOptions = {}) {
  const consumerId = options.consumerId ?? 'cli';
  const batchSize = options.batchSize ?? 1000;
  const dedupeTtlSeconds = options.dedupeTtlSeconds ?? DEFAULT_DEDUPE_TTL_SECONDS;
  const handler = options.handler ?? computeEffects;
  const lanes = Math.max(1, options.lanes ?? 1);
  const processingList = keys.processing(consumerId);

  /** Dead-letters a message that sits in the processing list. */
  async function reject(raw: string | Buffer, reason: string): Promise<Outcome> {
    return (await deadLetter(redis, processingList, raw, reason)) ? 'dead' : 'stale';
  }

  function toApply(raw: string, event: OutboxEvent, result: HandlerResult): EventToApply | string {
    if ('error' in result) return `handler failed: ${result.error}`;
    const { eventId, storeId, aggregateId, seq } = event;
    return { raw, eventId, storeId, aggregateId, seq, sku: result.sku, delta: result.delta, result: result.result };
  }

  /** Runs the handler over `events` in lanes by aggregate; resolves one result per event, in order. */
  async function runHandlers(events: OutboxEvent[]): Promise<HandlerResult[]> {
    const laneOf = (event: OutboxEvent) => event.aggregateId % lanes;
    const byLane = Array.from({ length: lanes }, () => [] as OutboxEvent[]);
    for (const event of events) byLane[laneOf(event)].push(event);
    const results = await Promise.all(
      byLane.map(async (lane) => {
        if (lane.length === 0) return [];
        try {
          return await handler(lane);
        } catch (error) {
          return lane.map(() => ({ error: (error as Error).message }));
        }
      }),
    );
    const next = results.map(() => 0);
    return events.map((event) => results[laneOf(event)][next[laneOf(event)]++]);
  }

  /**
   * Prepares a round of messages and sends, in list order, what it needs: bad ones are
   * dead-lettered one by one, good ones are applied by `applyEvents` in chunks that keep list order
   * (so an aggregate's effects are applied in order). Handlers run in lanes: one after another
   * within an aggregate, in parallel across lanes. Resolves once everything is sent, with
   * `answered` (wrapped, or await would flatten it): each message's outcome, once Redis answered.
   */
  async function sendRound(entries: Buffer[], stats: ConsumeStats): Promise<{ answered: Promise<Handled[]> }> {
    const parsed: Handled[] = [];
    for (const entry of entries) {
      const raw = decodeEntry(entry);
      if (raw === null) {
        parsed.push({ raw: entry, reason: 'not UTF-8 text' });
        continue;
      }
      try {
        parsed.push({ raw, event: parseMessage(raw) });
      } catch (error) {
        if (!(error instanceof MalformedMessageError)) throw error;
        parsed.push({ raw, reason: error.message });
      }
    }
    const valid = parsed.filter((p) => p.event);
    const results = await runHandlers(valid.map((p) => p.event!));
    const resultOf = new Map(valid.map((p, i) => [p, results[i]]));
    const toSend = parsed.map((p) => (p.event ? toApply(p.raw as string, p.event, resultOf.get(p)!) : undefined));
    // Everything below is sent synchronously, so rounds cannot interleave.
    const rejected: Handled[] = [];
    const applied: Handled[] = [];
    const batch: EventToApply[] = [];
    parsed.forEach((p, i) => {
      const prepared = toSend[i];
      if (prepared === undefined || typeof prepared === 'string') rejected.push({ ...p, reason: p.reason ?? (prepared as string) });
      else {
        applied.push(p);
        batch.push(prepared);
      }
    });
    const sent: Promise<Outcome[]>[] = rejected.map((p) => reject(p.raw, p.reason!).then((outcome) => [outcome]));
    for (let i = 0; i < batch.length; i += APPLY_CHUNK) {
      sent.push(
        applyEvents(redis, processingList, batch.slice(i, i + APPLY_CHUNK), dedupeTtlSeconds).then(({ outcomes, problems }) => {
          for (const problem of problems) options.onProblem?.(problem);
          return outcomes;
        }),
      );
    }
    const answered = Promise.all(sent).then((results) => {
      const outcomes = results.flat();
      if (outcomes.length > 0) crashPoint('consumer.after-apply', () => `crash point consumer.after-apply: dying after ${outcomes.length} messages were handled`);
      stats.received += entries.length;
      for (const outcome of outcomes) stats[STAT_OF[outcome]] += 1;
      return [...rejected, ...applied].map((p, i) => ({ raw: p.raw, event: p.event, reason: p.reason, outcome: outcomes[i] }));
    });
    return { answered };
  }

  async function handleAll(entries: Buffer[], stats: ConsumeStats): Promise<void> {
    await (await sendRound(entries, stats)).answered;
  }

  /** Handles whatever a previous run of this consumer left in its processing list. */
  async function recover(stats: ConsumeStats = emptyStats()): Promise<ConsumeStats> {
    const leftovers = await redis.lrangeBuffer(processingList, 0, -1);
    stats.recovered += leftovers.length;
    await handleAll(leftovers, stats);
    return stats;
  }

  /** Moves up to `batchSize` messages into the processing list (LMOVE each, in one script); resolves what was moved. */
  function take(connection: Redis): Promise<Buffer[]> {
    return takeMessages(connection, processingList, batchSize);
  }

  /**
   * Recovers, then consumes until `outbox.events` is empty. Rounds overlap: the next round is
   * taken (on a second connection) and parsed while Redis runs the previous round's scripts; the
   * scripts all go over one connection, in order, so list order is kept.
   */
  async function drain(onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> {
    // Alive while it drains, so that a consumer app does not reclaim this processing list.
    const stopHeartbeat = startHeartbeat(redis, consumerId);
    try {
      return await drainRounds(onRound);
    } finally {
      await stopHeartbeat();
    }
  }

  async function drainRounds(onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> {
    const stats = await recover();
    const taker = redis.duplicate();
    taker.on('error', () => {});
    defineScripts(taker);
    if (taker.status === 'wait') await taker.connect();
    let previous: Promise<void> = Promise.resolve();
    try {
      for (;;) {
        const raws = await take(taker);
        if (raws.length === 0) {
          // The previous round may have re-queued parked events: only an empty queue after it ends.
          await previous;
          if ((await redis.llen(keys.events)) === 0) return stats;
          continue;
        }
        crashPoint('consumer.after-lmove', () => `crash point consumer.after-lmove: dying with ${raws.length} messages in ${processingList}`);
        const { answered } = await sendRound(raws, stats);
        const current = answered.then(() => onRound?.(stats));
        // Observed below; without this, a failure of both rounds would leave this one unhandled.
        current.catch(() => {});
        await previous;
        previous = current;
      }
    } finally {
      await previous.catch(() => {});
      taker.disconnect();
    }
  }

  return { consumerId, processingList, recover, drain, sendRound, take };
}

export type Consumer = ReturnType<typeof createConsumer>;
