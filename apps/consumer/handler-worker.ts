import { computeEffect, type Effect } from '../../shared/consumer/effect.js';
import type { OutboxEvent } from '../../shared/events.js';

/** Runs in a piscina worker thread: one event's handler. */
export default function handle({ event, cpuCostMs }: { event: OutboxEvent; cpuCostMs: number }): Effect {
  return computeEffect(event, cpuCostMs);
}
