import { strike, type HandlerFault } from './handler-fault.js';
import { loadHandlerSet } from './load-handlers.js';
import { runRedisHandlers } from './run-redis-handlers.js';
import type { OutboxEvent } from '../store/events.js';

export interface HandlerTask {
  /** URL of the module whose export `handlers` is the handler set. */
  module: string;
  /**
   * The events, as one JSON text (`JSON.stringify(OutboxEvent[])`): a string crosses to the thread
   * as a copy of its bytes, where an object graph is cloned field by field on the consumer's
   * (busiest) thread.
   */
  events: string;
  /** The number of this attempt at each event (1 = first). */
  attempts: number[];
  cpuCostMs: number;
  /** The injected failure in force when the task was sent (OUTBOX_HANDLER_FAIL or its file), if any. */
  fault?: HandlerFault;
}

/**
 * Runs in a piscina worker thread: one task of events (a lane: all of a few aggregates, in order;
 * or one event being retried) through the handler set of `module`, loaded once per thread.
 * Resolves the `HandlerResult[]` as one JSON text, for the same reason the events come as one.
 */
export default async function handle({ module, events, attempts, cpuCostMs, fault }: HandlerTask): Promise<string> {
  const set = await loadHandlerSet(module);
  const parsed = JSON.parse(events) as OutboxEvent[];
  return JSON.stringify(runRedisHandlers(set, parsed, { cpuCostMs, beforeEach: fault ? (event, i) => strike(fault, event, attempts[i]) : undefined }));
}
