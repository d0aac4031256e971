import type { OutboxEvent } from '../store/events.js';
import { encodeEffect, type RedisEffect } from './effects.js';
import type { HandlerResult } from './handler-result.js';
import { deliver, PoisonEventError, type RedisHandlerSet } from './handlers.js';

export interface RunOptions {
  /** Simulated CPU work per event, ms (benchmarks and demos of heavier handlers). Default 0. */
  cpuCostMs?: number;
  /** Runs before each handler call (where the consumer app injects failures); a throw fails that attempt. */
  beforeEach?: (event: OutboxEvent, index: number) => void;
}

/** Busy-waits `ms`: a stand-in for a handler's real CPU work. */
function burnCpu(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/**
 * Runs a Redis-effects handler set over a task of events, in order; one failure does not stop the
 * others. An effect the apply script would refuse (a project key, a non-integer increment) is the
 * handler's mistake, the same at every attempt: poison, with the reason.
 */
// Any declarations: what the set holds is checked as each event is delivered.
export function runRedisHandlers(set: RedisHandlerSet<any>, events: OutboxEvent[], options: RunOptions = {}): HandlerResult[] {
  return events.map((event, index): HandlerResult => {
    const delivery = deliver(set, event);
    if ('poison' in delivery) return delivery;
    let effects: readonly RedisEffect[];
    try {
      options.beforeEach?.(event, index);
      if (options.cpuCostMs) burnCpu(options.cpuCostMs);
      effects = (delivery.handler as (e: unknown) => readonly RedisEffect[])(delivery.delivered);
    } catch (error) {
      if (error instanceof PoisonEventError) return { poison: error.message };
      return { error: (error as Error)?.message ?? String(error) };
    }
    if (!Array.isArray(effects)) return { poison: `the ${event.type} handler returned ${typeof effects}, not an array of effects` };
    try {
      return { effects: effects.map(encodeEffect) };
    } catch (error) {
      return { poison: `the ${event.type} handler returned a bad effect: ${(error as Error).message}` };
    }
  });
}
