import type { OutboxEvent } from '../store/events.js';

/** First wait after a failed handler attempt; it doubles with each further failure, up to the cap. */
export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 5_000;

/** How long an event waits after its `failedAttempts`-th failed attempt: exponential, capped. */
export function backoffMs(failedAttempts: number): number {
  return Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.max(0, failedAttempts - 1));
}

/** After the `tries`-th refusal for bad state in Redis: from 1 s, doubling, up to 30 s (an operator's fix takes a while). */
export function refusedBackoffMs(tries: number): number {
  return Math.min(30_000, 1000 * 2 ** Math.max(0, tries - 1));
}

/** An event whose handler failed: its message stays in the processing list until its next attempt. */
export interface Waiting {
  raw: string;
  event: OutboxEvent;
  /** Failed attempts so far (as counted in Redis). */
  attempts: number;
  /** When the next attempt is due, ms since epoch. */
  dueAt: number;
}

/**
 * The events one consumer waits to try again, kept in the order they failed (which is the order
 * they were taken, round by round). In memory only: the messages themselves stay in the processing
 * list, so a restarted consumer finds them there.
 */
export function createRetryQueue() {
  let waiting: Waiting[] = [];
  return {
    get size(): number {
      return waiting.length;
    },
    add(entry: Waiting): void {
      waiting.push(entry);
    },
    /** Removes and returns the entries due at `now`, in order. */
    removeDue(now: number): Waiting[] {
      const due = waiting.filter((w) => w.dueAt <= now);
      if (due.length > 0) waiting = waiting.filter((w) => w.dueAt > now);
      return due;
    },
    /** Ms until the next entry is due (0 when one is), null when none waits. */
    nextDueInMs(now: number): number | null {
      if (waiting.length === 0) return null;
      return Math.max(0, Math.min(...waiting.map((w) => w.dueAt)) - now);
    },
    /** Forgets every entry: the caller re-reads the processing list, which still holds them. */
    clear(): void {
      waiting = [];
    },
  };
}

export type RetryQueue = ReturnType<typeof createRetryQueue>;
