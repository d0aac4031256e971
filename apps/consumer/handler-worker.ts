import { computeEffects, type HandlerResult } from '../../shared/consumer/effect.js';
import type { OutboxEvent } from '../../shared/events.js';

/** Runs in a piscina worker thread: one lane of events (all of a few aggregates), in order. */
export default function handle({ events, cpuCostMs }: { events: OutboxEvent[]; cpuCostMs: number }): HandlerResult[] {
  return computeEffects(events, cpuCostMs);
}
