import type { z } from 'zod';
import { InvalidEventError } from '../../outbox/errors/invalid-event-error.js';
import type { OutboxEvent } from '../../outbox/store/events.js';
import { MalformedMessageError, parseMessage } from '../../outbox/store/parse-message.js';
import { orderEvents } from './order-events.js';

type Payload<T extends keyof typeof orderEvents.declarations> = z.output<(typeof orderEvents.declarations)[T]['payload']>;

/** An order event as the lab's handler and checks read it: its payload checked by its zod declaration. */
export type OrderEvent = Omit<OutboxEvent, 'type' | 'payload'> & OrderEventBody;

/** An order event's type and payload. */
export type OrderEventBody =
  | { type: 'OrderPlaced'; payload: Payload<'OrderPlaced'> }
  | { type: 'OrderQtyChanged'; payload: Payload<'OrderQtyChanged'> }
  | { type: 'OrderCancelled'; payload: Payload<'OrderCancelled'> };

/**
 * Checks a delivered event against the lab's declarations (`orderEvents`): a known order event
 * type, an `order:<id>` key, the payload its zod schema accepts, and `payload.orderId` naming the
 * same order as the key. Throws `MalformedMessageError` (poison: dead-lettered with this reason).
 */
export function validateOrderEvent(event: OutboxEvent): OrderEvent {
  let delivered;
  try {
    delivered = orderEvents.deliver(event);
  } catch (error) {
    if (error instanceof InvalidEventError) throw new MalformedMessageError(error.message);
    throw error;
  }
  if (String(delivered.payload.orderId) !== delivered.aggregateId) {
    throw new MalformedMessageError(`payload.orderId ${delivered.payload.orderId} is not the order of aggregate_id ${event.aggregateId}`);
  }
  return { ...event, type: delivered.type, payload: delivered.payload } as OrderEvent;
}

/** One queue entry parsed (envelope) and checked as an order event. */
export function parseOrderMessage(raw: string): OrderEvent {
  return validateOrderEvent(parseMessage(raw));
}
