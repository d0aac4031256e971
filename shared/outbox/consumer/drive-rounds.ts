import type { Redis } from 'ioredis';
import { crashPoint } from '../crash-point.js';
import { keys } from '../redis/keys.js';
import { defineScripts } from '../redis/scripts.js';
import { sleep } from '../sleep.js';
import type { ConsumeStats, Handled } from './consumer.js';

/** A message of a round and what became of it, as any engine reports it. */
export type RoundItem = Omit<Handled, 'outcome'> & { outcome?: string };

/** What the loop drives: the engine of consumer.ts, or database mode's (inbox/database-consumer.ts). */
export interface RoundEngine {
  processingList: string;
  /** Sends a round; resolves once it is sent, with `answered`: each message's outcome once done. */
  sendRound(entries: Buffer[], stats: ConsumeStats, options?: { recovered?: boolean }): Promise<{ answered: Promise<RoundItem[]> }>;
  /** Moves up to a batch of messages into the processing list; resolves what was moved. */
  take(connection: Redis): Promise<Buffer[]>;
  /** Ms until an event waiting for a retry (or a lease) is due (0: now), null when none waits. */
  nextRetryInMs(): number | null;
  /** Forgets the events waiting for a retry, before the processing list (which holds them) is read again. */
  forgetRetries(): void;
  /** Events refused for bad state in Redis that wait to be tried again. */
  refusedWaiting?(): number;
}

export interface DriveOptions {
  /**
   * 'empty' (a drain: the CLI, a batch job): ends once the queue is empty and nothing waits for a
   * retry; a failed take or round rejects `done`. 'stopped' (the app): runs until `stop()`, waits
   * with BLMOVE when idle, and a failed take or round is retried on a new connection, the
   * processing list dispatched again.
   */
  until: 'empty' | 'stopped';
  /** Opens the connection messages are taken on (the loop's own; it disconnects it). */
  connect: () => Promise<Redis>;
  /** The counters the rounds add to. */
  stats: ConsumeStats;
  /** 'stopped': BLMOVE timeout in seconds. Default 1. */
  blockTimeoutSeconds?: number;
  /**
   * 'stopped', with partitions: when the partition's lease ends at the latest. No take is sent that
   * could end after it (a take with its BLMOVE wait, and a margin): a consumer whose event loop
   * stalled past its lease (a long GC, a SIGSTOP) must not take again before its late renewal tells
   * it whether the lease is still its own. A take after the lease could move an event into a list
   * the new holder already dispatched (with one consumer id, its own). Default: no limit.
   */
  heldUntil?: () => number;
  /** Each round once answered. */
  onRound?: (handled: RoundItem[]) => void;
  /** Leftovers found in the processing list, before they are dispatched. */
  onRecovered?: (count: number) => void;
  /** 'stopped': a round Redis failed (its messages stay in the processing list). */
  onRoundError?: (error: Error) => void;
  /** 'stopped': a take failed (the connection is dropped and opened again). */
  onTakeError?: (error: Error) => void;
  /** Every take, with the number of messages it moved. */
  onTaken?: (count: number) => void;
  /** Around each BLMOVE wait. */
  onBlocking?: (blocking: boolean) => void;
}

/** How much earlier than its lease's end a take must be able to end (`heldUntil`), ms; also how long a take waits when it cannot. */
const TAKE_MARGIN_MS = 50;

/**
 * The consumer's one loop over rounds, for a drain and for the long-running app alike: dispatch
 * what the processing list holds (a predecessor's leftovers, events waiting for a retry), then take
 * and send rounds; the next round is taken while the previous one is answered (at most two in
 * flight), and the scripts go over `redis`, in order, so list order is kept.
 *
 * When nothing is queued, a drain waits for the rounds in flight (they may re-queue parked events
 * or leave events for a retry), then ends if the queue is still empty and nothing waits, or sleeps
 * until the first retry is due; the app waits with BLMOVE (ended early when a retry falls due).
 */
export function driveRounds(redis: Redis, engine: RoundEngine, options: DriveOptions) {
  const drain = options.until === 'empty';
  const { stats } = options;
  const { processingList } = engine;
  const blockTimeout = options.blockTimeoutSeconds ?? 1;
  let stopping = false;
  let connection: Redis | undefined;
  let needResync = true;
  let previous: Promise<void> = Promise.resolve();

  /** Sends a round; keeps at most two rounds waiting for Redis. A drain's failed round rejects here (or at the next). */
  async function round(entries: Buffer[], recovered = false): Promise<void> {
    const { answered } = await engine.sendRound(entries, stats, { recovered });
    const before = previous;
    previous = answered.then(
      (handled) => options.onRound?.(handled),
      (error: Error) => {
        if (drain) throw error;
        // The messages stay in the processing list: dispatch it again once Redis answers.
        needResync = true;
        options.onRoundError?.(error);
      },
    );
    // Observed at the next round or the end; without this, a failure of two rounds would leave one unhandled.
    previous.catch(() => {});
    await before;
  }

  /** Whether a take that may wait `waitSeconds` would end before the partition's lease does (`heldUntil`); always without one. */
  function leaseAllows(waitSeconds: number): boolean {
    return !options.heldUntil || Date.now() + waitSeconds * 1000 + TAKE_MARGIN_MS <= options.heldUntil();
  }

  /** What is queued; when nothing is: [] to go on (a retry may be due), or null when a drain is done. */
  async function takeOrIdle(taker: Redis): Promise<Buffer[] | null> {
    if (!leaseAllows(blockTimeout)) {
      // Until the lease is renewed, or let go of (which stops this loop).
      await sleep(TAKE_MARGIN_MS);
      return [];
    }
    const queued = await engine.take(taker);
    options.onTaken?.(queued.length);
    if (queued.length > 0) return queued;
    if (drain) {
      // The rounds in flight may re-queue parked events or leave events for a retry: only an empty
      // queue with nothing waiting after them ends the drain.
      await previous;
      if ((await redis.llen(keys.events)) > 0) return [];
      const dueInMs = engine.nextRetryInMs();
      if (dueInMs === null) return null;
      await sleep(dueInMs);
      return [];
    }
    const retryInMs = engine.nextRetryInMs();
    if (retryInMs === 0) return [];
    // A retry due ends the wait then (a blockTimeout of 0, "for ever", included).
    const untilRetry = retryInMs === null ? null : Math.max(retryInMs, 10) / 1000;
    const timeout = untilRetry === null ? blockTimeout : blockTimeout > 0 ? Math.min(blockTimeout, untilRetry) : untilRetry;
    // Asked again: time went by since the check above (the take's round trip, at least).
    if (!leaseAllows(timeout)) return [];
    options.onBlocking?.(true);
    try {
      const first = await taker.blmoveBuffer(keys.events, processingList, 'LEFT', 'RIGHT', timeout);
      return first ? [first] : [];
    } finally {
      options.onBlocking?.(false);
    }
  }

  /** Dispatches what the processing list holds: the events waiting for a retry are there too, handled as leftovers. */
  async function resync(): Promise<void> {
    needResync = false;
    await previous;
    engine.forgetRetries();
    const leftovers = await redis.lrangeBuffer(processingList, 0, -1);
    if (leftovers.length === 0) return;
    options.onRecovered?.(leftovers.length);
    stats.recovered += leftovers.length;
    await round(leftovers, true);
  }

  // A BLMOVE re-sent after a reconnect could move a second message while the first one's reply was
  // lost. So the app's taking connection never reconnects: a failed take drops it, connects a new
  // one and dispatches the processing list again (anything already applied is found gone: 'stale').
  async function loop(): Promise<void> {
    try {
      while (!stopping) {
        try {
          connection ??= await takesWrittenAtOnce(await options.connect());
          if (needResync) await resync();
          const entries = await takeOrIdle(connection);
          if (entries === null) return;
          if (entries.length > 0) crashPoint('consumer.after-lmove', () => `crash point consumer.after-lmove: dying with ${entries.length} messages in ${processingList}`);
          if (entries.length > 0 || engine.nextRetryInMs() === 0) await round(entries);
        } catch (error) {
          if (drain) throw error;
          connection?.disconnect();
          connection = undefined;
          if (stopping) return;
          needResync = true;
          options.onTakeError?.(error as Error);
          await sleep(500);
        }
      }
    } finally {
      if (drain) {
        await previous.catch(() => {});
        connection?.disconnect();
      }
    }
  }

  const done = loop();
  return {
    /** Resolves when a drain is done (rejects when it failed), or once stopped. */
    done,
    /** Stops taking (a blocked BLMOVE included) and lets the rounds already sent finish. */
    async stop(): Promise<void> {
      stopping = true;
      connection?.disconnect();
      await done.catch(() => {});
      await previous;
    },
  };
}

/**
 * The loop's taking connection, with ioredis's auto-pipelining off on it: a take is then written
 * to the socket when it is decided, not on the next tick. Otherwise a process stopped in between
 * (SIGSTOP, a long GC) sends, once it runs again, a take it decided under a lease that may have
 * ended meanwhile (`heldUntil` is checked at the decision). The loop sends one take at a time, so
 * auto-pipelining gave it nothing.
 */
function takesWrittenAtOnce(connection: Redis): Redis {
  connection.options.enableAutoPipelining = false;
  return connection;
}

/** A second connection like `redis` (its scripts defined), for a drain to take on while `redis` runs the scripts. */
export async function takingConnection(redis: Redis): Promise<Redis> {
  const taker = redis.duplicate();
  // Its failures reach the loop as rejected commands.
  taker.on('error', () => {});
  defineScripts(taker);
  if (taker.status === 'wait') await taker.connect();
  return taker;
}
