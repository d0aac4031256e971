import { strike, type HandlerFault } from './handler-fault.js';
import type { HandlerResult } from './handler-result.js';
import { loadHandlerSet } from './load-handlers.js';
import { runRedisHandlers } from './run-redis-handlers.js';
import type { OutboxEvent } from '../store/events.js';

export interface HandlerTask {
  /** URL of the module whose export `handlers` is the handler set. */
  module: string;
  events: OutboxEvent[];
  /** The number of this attempt at each event (1 = first). */
  attempts: number[];
  cpuCostMs: number;
  /** The injected failure in force when the task was sent (OUTBOX_HANDLER_FAIL or its file), if any. */
  fault?: HandlerFault;
}

/**
 * Runs in a piscina worker thread: one task of events (a lane: all of a few aggregates, in order;
 * or one event being retried) through the handler set of `module`, loaded once per thread.
 */
export default async function handle({ module, events, attempts, cpuCostMs, fault }: HandlerTask): Promise<HandlerResult[]> {
  const set = await loadHandlerSet(module);
  return runRedisHandlers(set, events, { cpuCostMs, beforeEach: fault ? (event, i) => strike(fault, event, attempts[i]) : undefined });
}
