import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import type { OutboxEvent } from '../events.js';
import type { Logger } from '../logger.js';
import { MalformedMessageError, parseMessage } from '../parse-message.js';
import { keys } from '../redis/keys.js';
import { sleep } from '../sleep.js';
import { createConsumer, emptyStats, type ConsumerOptions, type Outcome } from './consumer.js';
import { decodeEntry } from './decode-entry.js';

export interface RunConsumerOptions extends ConsumerOptions {
  consumerId: string;
  /** Messages taken but not yet acked, at most. Default 512. */
  maxInFlight?: number;
  /** BLMOVE timeout in seconds: how long an idle take waits. Default 1. */
  blockTimeoutSeconds?: number;
  /** After a BLMOVE returns, up to this many more are moved without blocking. Default 100. */
  takeBatch?: number;
  /** Interval of the throughput log line, ms (0 = never). Default 10000. */
  statsIntervalMs?: number;
}

/**
 * The long-running consumer. `connectBlocking` opens the connection for BLMOVE, one that fails
 * fast instead of reconnecting (see `takeLoop`); `redis` runs the apply scripts.
 * Events of one aggregate are applied strictly one after another in queue order; events of
 * different aggregates run in parallel on `options.handler` (a worker pool).
 */
export function startConsumer(redis: Redis, connectBlocking: () => Promise<Redis>, log: Logger, options: RunConsumerOptions) {
  const maxInFlight = options.maxInFlight ?? 512;
  const blockTimeout = options.blockTimeoutSeconds ?? 1;
  const takeBatch = options.takeBatch ?? 100;
  const consumer = createConsumer(redis, options);
  const { processingList } = consumer;
  const stats = emptyStats();
  const chains = new Map<number | string, Promise<void>>();
  let inFlight = 0;
  let slotFreed: (() => void) | undefined;
  let stopping = false;
  let blocking: Redis | undefined;

  function count(outcome: Outcome, raw: string | Buffer, event?: OutboxEvent): void {
    stats.received += 1;
    if (outcome === 'applied') stats.applied += 1;
    else if (outcome === 'duplicate') {
      stats.duplicates += 1;
      log.info('duplicate skipped', { eventId: event?.eventId, aggregateId: event?.aggregateId, seq: event?.seq });
    } else if (outcome === 'parked') {
      stats.parked += 1;
      log.warn('gap: event parked until the missing one arrives', { eventId: event?.eventId, aggregateId: event?.aggregateId, seq: event?.seq });
    } else if (outcome === 'dead') {
      stats.dead += 1;
      log.warn('dead-lettered', { message: raw.toString().slice(0, 200) });
    } else if (outcome === 'invalid') {
      stats.invalid += 1;
      log.error('event refused: Redis holds a non-number for its aggregate or SKU; left in the processing list', { eventId: event?.eventId });
    } else stats.stale += 1;
  }

  async function process(raw: string | Buffer, event: OutboxEvent | undefined, reason: string | undefined): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        const outcome = event ? await consumer.apply(raw as string, event) : await consumer.reject(raw, reason!);
        crashPoint('consumer.after-apply');
        count(outcome, raw, event);
        return;
      } catch (error) {
        // Redis errors only: the message stays in the processing list, so retrying is safe.
        if (stopping) return;
        log.warn('cannot apply event, retrying', { eventId: event?.eventId, attempt, error: (error as Error).message });
        await sleep(Math.min(2000, 50 * 2 ** attempt));
      }
    }
  }

  /** Queues a message behind the previous one of its aggregate. */
  function dispatch(entry: Buffer): void {
    const text = decodeEntry(entry);
    const raw = text ?? entry;
    let event: OutboxEvent | undefined;
    let reason: string | undefined = text === null ? 'not UTF-8 text' : undefined;
    if (text !== null) {
      try {
        event = parseMessage(text);
      } catch (error) {
        if (!(error instanceof MalformedMessageError)) throw error;
        reason = error.message;
      }
    }
    const key = event ? event.aggregateId : 'malformed';
    inFlight += 1;
    const next = (chains.get(key) ?? Promise.resolve()).then(() => process(raw, event, reason));
    chains.set(key, next);
    void next.finally(() => {
      if (chains.get(key) === next) chains.delete(key);
      inFlight -= 1;
      slotFreed?.();
    });
  }

  async function waitForSlot(): Promise<void> {
    while (inFlight >= maxInFlight) await new Promise<void>((resolve) => (slotFreed = resolve));
  }

  /** Dispatches what sits in the processing list: at start, and after a failed take. */
  async function resync(): Promise<number> {
    const leftovers = await redis.lrangeBuffer(processingList, 0, -1);
    // Anything already in flight is acked by then or, dispatched twice, found gone ('stale').
    for (const raw of leftovers) dispatch(raw);
    return leftovers.length;
  }

  async function take(blocking: Redis): Promise<Buffer[]> {
    const first = await blocking.blmoveBuffer(keys.events, processingList, 'LEFT', 'RIGHT', blockTimeout);
    if (first === null) return [];
    const room = Math.min(takeBatch, maxInFlight - inFlight - 1);
    if (room <= 0) return [first];
    const pipeline = blocking.pipeline();
    for (let i = 0; i < room; i += 1) pipeline.lmoveBuffer(keys.events, processingList, 'LEFT', 'RIGHT');
    const more = ((await pipeline.exec()) ?? []).map(([, raw]) => raw).filter((raw): raw is Buffer => Buffer.isBuffer(raw));
    return [first, ...more];
  }

  // A BLMOVE re-sent after a reconnect could move a second message while the first one's reply was
  // lost. So the blocking connection never reconnects: a failed take drops it, connects a new one
  // and dispatches the processing list again.
  async function takeLoop(): Promise<void> {
    let needResync = true;
    while (!stopping) {
      try {
        blocking ??= await connectBlocking();
        if (needResync) {
          const recovered = await resync();
          if (recovered > 0) log.info('processing list recovered', { processingList, count: recovered });
          stats.recovered += recovered;
          needResync = false;
        }
        await waitForSlot();
        const raws = await take(blocking);
        if (raws.length > 0) crashPoint('consumer.after-lmove');
        for (const raw of raws) dispatch(raw);
      } catch (error) {
        blocking?.disconnect();
        blocking = undefined;
        if (stopping) return;
        needResync = true;
        log.warn('cannot take from the queue, retrying', { error: (error as Error).message });
        await sleep(500);
      }
    }
  }

  const statsTimer =
    (options.statsIntervalMs ?? 10_000) > 0
      ? setInterval(() => {
          if (stats.received > 0) log.info('consumer stats', { ...stats, inFlight });
        }, options.statsIntervalMs ?? 10_000)
      : undefined;
  statsTimer?.unref();

  const loop = takeLoop();

  return {
    stats,
    processingList,
    /**
     * Stops taking, lets every dispatched event finish, then hands what is still in the processing
     * list back to the head of the queue, in order.
     */
    async stop(): Promise<void> {
      stopping = true;
      if (statsTimer) clearInterval(statsTimer);
      blocking?.disconnect();
      await loop;
      await Promise.all(chains.values());
      let handedBack = 0;
      while ((await redis.lmove(processingList, keys.events, 'RIGHT', 'LEFT')) !== null) handedBack += 1;
      log.info('consumer stopped', { ...stats, handedBack });
    },
  };
}
