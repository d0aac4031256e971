import type { OutboxEvent } from '../../outbox/store/events.js';
import { inventoryDelta, type OrderEvent } from './order-message.js';

/** What applying an event means: a change of the reserved quantity of one SKU. */
export interface Effect {
  sku: string;
  delta: number;
  /** JSON kept in the processed hash. */
  result: string;
}

/** Busy-waits `ms`: a stand-in for a handler's real CPU work, for demos and benchmarks. */
function burnCpu(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/** The event handler. Pure, so it can run in a worker thread; `cpuCostMs` simulates heavier handlers. */
export function computeEffect(event: OutboxEvent, cpuCostMs = 0): Effect {
  if (cpuCostMs > 0) burnCpu(cpuCostMs);
  // The consumer checked it as an order event (parseOrderMessage) before it reached the handler.
  const order = event as unknown as OrderEvent;
  const delta = inventoryDelta(order);
  const { sku } = order.payload;
  return { sku, delta, result: JSON.stringify({ type: event.type, aggregateId: event.aggregateId, seq: event.seq, sku, delta }) };
}

/** A handler's answer for one event: its effect, or why it could not be computed. */
export type HandlerResult = Effect | { error: string };

/**
 * Runs the handler over a lane of events, in order; one failure does not stop the others.
 * `beforeEach` runs first for each event (where the consumer app injects failures).
 */
export function computeEffects(events: OutboxEvent[], cpuCostMs = 0, beforeEach?: (event: OutboxEvent, index: number) => void): HandlerResult[] {
  return events.map((event, index) => {
    try {
      beforeEach?.(event, index);
      return computeEffect(event, cpuCostMs);
    } catch (error) {
      return { error: (error as Error).message };
    }
  });
}
