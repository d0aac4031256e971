import { computeEffects, type HandlerResult } from '../../shared/lab/orders/effect.js';
import { strike, type HandlerFault } from '../../shared/outbox/consumer/handler-fault.js';
import type { OutboxEvent } from '../../shared/outbox/store/events.js';

/**
 * Runs in a piscina worker thread: one task of events (a lane: all of a few aggregates, in order;
 * or one event being retried), each with the number of this attempt at it (1 = first), and the
 * injected failure in force when main.ts sent it (OUTBOX_HANDLER_FAIL or its file), if any.
 */
export default function handle({ events, attempts, cpuCostMs, fault }: { events: OutboxEvent[]; attempts: number[]; cpuCostMs: number; fault?: HandlerFault }): HandlerResult[] {
  return computeEffects(events, cpuCostMs, (event, i) => strike(fault, event, attempts[i]));
}
