import { deltaSince } from '../stats-interval.js';
import { emptyStats, type ConsumeStats } from './consumer.js';

export interface ConsumerCounters extends ConsumeStats {
  /** Takes and rounds that failed (Redis gone, a key of the wrong type) and bad state met in Redis. */
  errors: number;
}

/**
 * The consumer app's own numbers: what its health endpoint, its heartbeat and its `consumer stats`
 * line report. `counters` is the object the consumer counts outcomes into.
 *
 * Lag: a message carries no time, so the lag is measured from the queue's side: the time since
 * this consumer last found `outbox.events` empty (a take that got less than a full batch, or a
 * blocking take that waited). No message waiting in the queue is older than that; it is 0 while a
 * blocking take waits, and stays within one round while the consumer keeps up.
 */
export function createConsumerStats(batchSize: number) {
  const counters: ConsumerCounters = { ...emptyStats(), errors: 0 };
  let emptyAt = Date.now();
  let waiting = false;
  let lastTakeAt: number | null = null;
  let heartbeatAt: number | null = null;
  let refused = { waiting: 0, problem: '' };

  return {
    counters,
    /** Counters changed since the previous call: the `consumer stats` line's interval. */
    interval: deltaSince(counters),
    /** A take got `count` messages (a non-blocking take of up to `batchSize`). */
    taken(count: number): void {
      lastTakeAt = Date.now();
      if (count < batchSize) emptyAt = lastTakeAt;
    },
    /** A blocking take starts (the queue is empty) or ends. */
    blocking(on: boolean): void {
      waiting = on;
      lastTakeAt = emptyAt = Date.now();
    },
    error(): void {
      counters.errors += 1;
    },
    heartbeat(at: number): void {
      heartbeatAt = at;
    },
    /** Events refused for bad state in Redis, waiting in the processing list to be tried again, and the last problem met. */
    refused(waiting: number, problem: string): void {
      refused = { waiting, problem: waiting > 0 ? problem : '' };
    },
    lagMs(now = Date.now()): number {
      return waiting ? 0 : now - emptyAt;
    },
    snapshot(now = Date.now()) {
      return {
        ...counters,
        lagMs: waiting ? 0 : now - emptyAt,
        lastTakeAgeMs: lastTakeAt === null ? null : waiting ? 0 : now - lastTakeAt,
        heartbeatAgeMs: heartbeatAt === null ? null : now - heartbeatAt,
        refusedWaiting: refused.waiting,
        refusedProblem: refused.problem,
      };
    },
  };
}

export type ConsumerStats = ReturnType<typeof createConsumerStats>;
