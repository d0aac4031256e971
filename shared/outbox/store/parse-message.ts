import { isAggregateKey } from '../events/aggregate-key.js';
import type { OutboxEvent } from './events.js';

/** Why a queue entry cannot be handled; it goes to the dead-letter list with this reason. */
export class MalformedMessageError extends Error {}

const MAX_SEQ = Number.MAX_SAFE_INTEGER;

function positiveInt(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_SEQ) {
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

/**
 * Parses and checks the envelope of one queue entry, whatever its event type: event_id, the
 * aggregate key, seq, event_type, an object payload, store_id and, when there, created_at. The payload's own fields are its
 * declaration's business (`EventSet.deliver`). Throws `MalformedMessageError` with the reason.
 */
export function parseMessage(raw: string): OutboxEvent {
  let message: unknown;
  try {
    message = JSON.parse(raw);
  } catch {
    throw new MalformedMessageError('not JSON');
  }
  if (!isObject(message)) throw new MalformedMessageError('not a JSON object');
  const eventId = nonEmptyString(message.event_id, 'event_id', 128);
  const aggregateId = message.aggregate_id;
  if (!isAggregateKey(aggregateId)) throw new MalformedMessageError('aggregate_id must be an aggregate key "<aggregateType>:<aggregateId>"');
  const seq = positiveInt(message.seq, 'seq');
  const storeId = nonEmptyString(message.store_id, 'store_id', 64);
  const type = nonEmptyString(message.event_type, 'event_type', 128);
  const payload = message.payload;
  if (!isObject(payload)) throw new MalformedMessageError('payload must be a JSON object');
  // Optional: messages an older relay pushed have none.
  const createdAt = timeOf(message.created_at, 'created_at');
  if (createdAt === undefined) return { eventId, storeId, aggregateId, seq, type, payload };
  const prevCreatedAt = timeOf(message.prev_created_at, 'prev_created_at');
  if (prevCreatedAt === undefined) return { eventId, storeId, aggregateId, seq, type, payload, createdAt };
  return { eventId, storeId, aggregateId, seq, type, payload, createdAt, prevCreatedAt };
}

/** An optional time in ms since the epoch: messages an older relay pushed have none. */
function timeOf(value: unknown, field: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new MalformedMessageError(`${field} must be a time in ms since the epoch`);
  return value;
}
