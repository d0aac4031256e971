import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { OutboxEvent } from '../events.js';
import { MalformedMessageError, parseMessage } from '../parse-message.js';
import { keys } from '../redis/keys.js';
import { applyEvent, deadLetter, type ApplyOutcome } from '../redis/scripts.js';
import { decodeEntry } from './decode-entry.js';
import { computeEffect, type Effect } from './effect.js';

export interface ConsumerOptions {
  /**
   * Names this consumer's processing list. A consumer started again with the same id handles what
   * its predecessor left there. Default 'cli'.
   */
  consumerId?: string;
  /** Messages moved (LMOVE, pipelined) per round trip. Default 500. */
  batchSize?: number;
  /** TTL of the per-event dedupe marker, in seconds; 0 keeps it forever. Default 7 days. */
  dedupeTtlSeconds?: number;
  /** Computes an event's effect (e.g. on a worker pool). Default: `computeEffect` in this thread. */
  handler?: (event: OutboxEvent) => Effect | Promise<Effect>;
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
}

const STAT_OF: Record<Outcome, keyof ConsumeStats> = {
  applied: 'applied',
  duplicate: 'duplicates',
  parked: 'parked',
  dead: 'dead',
  stale: 'stale',
};

export const DEFAULT_DEDUPE_TTL_SECONDS = 7 * 24 * 3600;

export function emptyStats(): ConsumeStats {
  return { received: 0, recovered: 0, applied: 0, duplicates: 0, parked: 0, dead: 0, stale: 0 };
}

/**
 * The idempotent consumer. Every message is first moved to this consumer's own processing list and
 * removed from it only by the same atomic script that applies it, so a crash at any instant leaves
 * it either applied or still in the processing list, never both and never neither.
 */
export function createConsumer(redis: Redis, options: ConsumerOptions = {}) {
  const consumerId = options.consumerId ?? 'cli';
  const batchSize = options.batchSize ?? 500;
  const dedupeTtlSeconds = options.dedupeTtlSeconds ?? DEFAULT_DEDUPE_TTL_SECONDS;
  const handler = options.handler ?? computeEffect;
  const processingList = keys.processing(consumerId);

  /** Dead-letters a message that sits in the processing list. */
  async function reject(raw: string | Buffer, reason: string): Promise<Outcome> {
    return (await deadLetter(redis, processingList, raw, reason)) ? 'dead' : 'stale';
  }

  /** Handles one parsed event whose message sits in the processing list. */
  async function apply(raw: string, event: OutboxEvent): Promise<Outcome> {
    let effect: Effect;
    try {
      effect = await handler(event);
    } catch (error) {
      return reject(raw, `handler failed: ${(error as Error).message}`);
    }
    return applyEvent(redis, {
      processingList,
      raw,
      eventId: event.eventId,
      aggregateId: event.aggregateId,
      seq: event.seq,
      sku: effect.sku,
      delta: effect.delta,
      result: effect.result,
      dedupeTtlSeconds,
    });
  }

  /** Handles one message that sits in the processing list. */
  async function handle(entry: string | Buffer): Promise<Outcome> {
    const raw = typeof entry === 'string' ? entry : decodeEntry(entry);
    if (raw === null) return reject(entry, 'not UTF-8 text');
    let event;
    try {
      event = parseMessage(raw);
    } catch (error) {
      if (!(error instanceof MalformedMessageError)) throw error;
      return reject(raw, error.message);
    }
    return apply(raw, event);
  }

  /**
   * Handles messages in list order: every path awaits the same number of steps before its script
   * is sent, so scripts are sent, and run, in list order.
   */
  async function handleAll(raws: Buffer[], stats: ConsumeStats): Promise<void> {
    const outcomes = await Promise.all(
      raws.map(async (raw) => {
        const outcome = await handle(raw);
        crashPoint('consumer.after-apply', () => `crash point consumer.after-apply: dying after a message was handled (${outcome})`);
        return outcome;
      }),
    );
    stats.received += raws.length;
    for (const outcome of outcomes) stats[STAT_OF[outcome]] += 1;
  }

  /** Handles whatever a previous run of this consumer left in its processing list. */
  async function recover(stats: ConsumeStats = emptyStats()): Promise<ConsumeStats> {
    const leftovers = await redis.lrangeBuffer(processingList, 0, -1);
    stats.recovered += leftovers.length;
    await handleAll(leftovers, stats);
    return stats;
  }

  /** Moves up to `batchSize` messages into the processing list; resolves what was moved. */
  async function take(): Promise<Buffer[]> {
    const pipeline = redis.pipeline();
    for (let i = 0; i < batchSize; i += 1) pipeline.lmoveBuffer(keys.events, processingList, 'LEFT', 'RIGHT');
    const replies = (await pipeline.exec()) ?? [];
    const raws: Buffer[] = [];
    for (const [error, raw] of replies) {
      if (error) throw error;
      if (raw) raws.push(raw as Buffer);
    }
    return raws;
  }

  /** Recovers, then consumes until `outbox.events` is empty. */
  async function drain(onRound?: (stats: ConsumeStats) => void): Promise<ConsumeStats> {
    const stats = await recover();
    for (;;) {
      const raws = await take();
      if (raws.length === 0) return stats;
      crashPoint('consumer.after-lmove', () => `crash point consumer.after-lmove: dying with ${raws.length} messages in ${processingList}`);
      await handleAll(raws, stats);
      onRound?.(stats);
    }
  }

  return { consumerId, processingList, handle, apply, reject, recover, drain };
}

export type Consumer = ReturnType<typeof createConsumer>;
