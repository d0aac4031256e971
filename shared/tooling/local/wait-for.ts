export interface WaitOptions {
  /** Give up after this many ms. Default 10000. */
  timeoutMs?: number;
  /** Poll every this many ms. Default 25. */
  intervalMs?: number;
  message?: string;
}

/** Polls `condition` until it returns a truthy value (which is resolved) or the deadline passes. */
export async function waitFor<T>(condition: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(options.message ?? 'condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 25));
  }
}
