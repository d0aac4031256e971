import type { Job } from 'bullmq';

/** The relay no longer surely holds its BullMQ job lock: another relay may run a pass, so this one stops writing. */
export class LockLostError extends Error {}

export interface JobLock {
  /**
   * Throws `LockLostError` unless the lock is held for at least `marginMs` more (by the last
   * extension Redis confirmed): called before every push and every mark, and at a pass's end.
   */
  assertHeld(): void;
  /** Asks Redis to extend the lock (one request at a time); a refusal means it is lost. */
  extend(): Promise<void>;
  /** Aborted once Redis refused an extension: the lock is another worker's or gone. */
  readonly lost: AbortSignal;
  /** Stops extending it (the job ends). */
  release(): void;
}

export interface JobLockOptions {
  /** The worker's `lockDuration` (ms): each extension holds the lock this long. */
  durationMs: number;
  /**
   * How long a write may take after `assertHeld` (ms): at least the SQLite busy timeout, so a mark
   * that waited for app.db still ends while the lock is held.
   */
  marginMs: number;
}

/**
 * Holds a running job's lock: extends it now, every `durationMs / 4` and whenever asked (after a
 * batch). BullMQ renews locks too, but on a timer that a blocked event loop delays and without
 * telling the processor; this tells it, before it writes, whether it still owns the pass.
 */
export async function holdJobLock(job: Job, token: string, { durationMs, marginMs }: JobLockOptions): Promise<JobLock> {
  const lost = new AbortController();
  let heldUntil = 0;
  let extending: Promise<void> | undefined;

  function extend(): Promise<void> {
    extending ??= (async () => {
      const sent = Date.now();
      try {
        if ((await job.extendLock(token, durationMs)) === 1) heldUntil = sent + durationMs;
        else lost.abort();
      } catch {
        // Redis unreachable: the lock runs out by itself, and assertHeld says so when it does.
      } finally {
        extending = undefined;
      }
    })();
    return extending;
  }

  await extend();
  const timer = setInterval(() => void extend(), durationMs / 4);
  timer.unref();
  return {
    assertHeld() {
      if (lost.signal.aborted) throw new LockLostError(`relay lost its job lock (job ${job.id}): stopping this pass, another relay takes over`);
      if (Date.now() > heldUntil - marginMs) {
        throw new LockLostError(`relay's job lock (job ${job.id}) was not extended in time (event loop blocked or Redis unreachable): stopping this pass`);
      }
    },
    extend,
    lost: lost.signal,
    release: () => clearInterval(timer),
  };
}
