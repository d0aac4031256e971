import { EVENT_TYPES, type EventType, type OutboxEvent } from './events.js';

/** Why a queue entry cannot be handled; it goes to the dead-letter list with this reason. */
export class MalformedMessageError extends Error {}

const MAX_ID = Number.MAX_SAFE_INTEGER;

function positiveInt(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_ID) {
    throw new MalformedMessageError(`${field} must be a positive integer`);
  }
  return value;
}

function nonEmptyString(value: unknown, field: string, maxLength: number): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > maxLength) {
    throw new MalformedMessageError(`${field} must be a non-empty string of at most ${maxLength} characters`);
  }
  return value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Parses and checks one queue entry; throws `MalformedMessageError` with the reason. */
export function parseMessage(raw: string): OutboxEvent {
  let message: unknown;
  try {
    message = JSON.parse(raw);
  } catch {
    throw new MalformedMessageError('not JSON');
  }
  if (!isObject(message)) throw new MalformedMessageError('not a JSON object');
  const eventId = nonEmptyString(message.event_id, 'event_id', 128);
  const aggregateId = positiveInt(message.aggregate_id, 'aggregate_id');
  const seq = positiveInt(message.seq, 'seq');
  const storeId = nonEmptyString(message.store_id, 'store_id', 64);
  const type = message.event_type;
  if (!EVENT_TYPES.includes(type as EventType)) {
    throw new MalformedMessageError(`unknown event_type ${JSON.stringify(type)}`);
  }
  const payload = message.payload;
  if (!isObject(payload)) throw new MalformedMessageError('payload must be a JSON object');
  if (payload.orderId !== aggregateId) throw new MalformedMessageError('payload.orderId must equal aggregate_id');
  const common = {
    orderId: aggregateId,
    sku: nonEmptyString(payload.sku, 'payload.sku', 64),
    qty: positiveInt(payload.qty, 'payload.qty'),
  };
  if (type === 'OrderQtyChanged') {
    return {
      eventId,
      storeId,
      aggregateId,
      seq,
      type,
      payload: { ...common, previousQty: positiveInt(payload.previousQty, 'payload.previousQty') },
    };
  }
  return { eventId, storeId, aggregateId, seq, type: type as EventType, payload: common };
}
