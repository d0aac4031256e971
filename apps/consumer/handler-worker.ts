import { computeEffects, type HandlerResult } from '../../shared/consumer/effect.js';
import { parseHandlerFault, strike } from '../../shared/consumer/handler-fault.js';
import type { OutboxEvent } from '../../shared/events.js';

/** Failures injected for tests and chaos (env OUTBOX_HANDLER_FAIL, checked by main.ts at start). */
const fault = parseHandlerFault(process.env.OUTBOX_HANDLER_FAIL);

/**
 * Runs in a piscina worker thread: one task of events (a lane: all of a few aggregates, in order;
 * or one event being retried), each with the number of this attempt at it (1 = first).
 */
export default function handle({ events, attempts, cpuCostMs }: { events: OutboxEvent[]; attempts: number[]; cpuCostMs: number }): HandlerResult[] {
  return computeEffects(events, cpuCostMs, (event, i) => strike(fault, event, attempts[i]));
}
