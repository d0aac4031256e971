import type { Logger } from './logger.js';

/** What `counters` changed by since the previous call (the first call: since creation). */
export function deltaSince<T extends { [K in keyof T]: number }>(counters: T): () => T {
  let last = { ...counters };
  return () => {
    const delta = Object.fromEntries((Object.keys(counters) as (keyof T)[]).map((key) => [key, counters[key] - last[key]])) as T;
    last = { ...counters };
    return delta;
  };
}

/** `zero`'s counters, each summed over `list` (a counter missing from an entry counts 0). */
export function sumCounters<T extends { [K in keyof T]: number }>(zero: T, list: readonly Partial<T>[]): T {
  const total = { ...zero };
  for (const counters of list) for (const key of Object.keys(total) as (keyof T)[]) total[key] = (total[key] + (counters[key] ?? 0)) as T[keyof T];
  return total;
}

/**
 * Calls `tick` every `everyMs` (never when 0) without keeping the process alive; a failing tick is
 * logged as a warning, and ticks never overlap. Resolves the stop.
 */
export function everyInterval(everyMs: number, tick: () => Promise<void> | void, log: Logger): () => void {
  if (everyMs <= 0) return () => {};
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    Promise.resolve()
      .then(tick)
      .catch((error: Error) => log.warn('cannot write the stats line', { error: error.message }))
      .finally(() => (busy = false));
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
