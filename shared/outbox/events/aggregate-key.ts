import { InvalidEventError } from '../errors/invalid-event-error.js';

/** An aggregate type: a letter, then letters, digits, `_`, `.` or `-` (never `:`, the key's separator). */
export const AGGREGATE_TYPE_PATTERN = /^[A-Za-z][A-Za-z0-9_.-]*$/;
export const MAX_AGGREGATE_TYPE_LENGTH = 64;
/** Longest aggregate id (as text): the key rides on every message, in Redis hash fields and parked fields. */
export const MAX_AGGREGATE_ID_LENGTH = 200;

/** Why `type` is not an aggregate type, or undefined when it is one. */
export function aggregateTypeProblem(type: unknown): string | undefined {
  if (typeof type !== 'string' || type.length > MAX_AGGREGATE_TYPE_LENGTH || !AGGREGATE_TYPE_PATTERN.test(type)) {
    return `aggregate type must be 1-${MAX_AGGREGATE_TYPE_LENGTH} characters: a letter, then letters, digits, "_", "." or "-", got ${show(type)}`;
  }
  return undefined;
}

/** The id as the key holds it: a positive integer as its decimal text, a string as it is; undefined when neither. */
function idText(id: unknown): string | undefined {
  if (typeof id === 'number') return Number.isSafeInteger(id) && id > 0 ? String(id) : undefined;
  if (typeof id === 'string' && id.length > 0 && id.length <= MAX_AGGREGATE_ID_LENGTH) return id;
  return undefined;
}

/**
 * The opaque key `<aggregateType>:<aggregateId>` that names an aggregate in the outbox table, on
 * the wire and in Redis (`order:42`). Throws `InvalidEventError` for a bad type or id.
 */
export function aggregateKey(aggregateType: unknown, aggregateId: unknown): string {
  const typeProblem = aggregateTypeProblem(aggregateType);
  if (typeProblem) throw new InvalidEventError(typeProblem);
  const id = idText(aggregateId);
  if (id === undefined) {
    throw new InvalidEventError(
      `aggregate id must be a positive integer or a non-empty string of at most ${MAX_AGGREGATE_ID_LENGTH} characters, got ${show(aggregateId)}`,
    );
  }
  return `${aggregateType}:${id}`;
}

/** A key split at its first `:`; undefined when `key` does not follow the key rule. */
export function splitAggregateKey(key: string): { aggregateType: string; aggregateId: string } | undefined {
  const colon = key.indexOf(':');
  if (colon < 0) return undefined;
  const aggregateType = key.slice(0, colon);
  const aggregateId = key.slice(colon + 1);
  if (aggregateTypeProblem(aggregateType) || aggregateId.length === 0 || aggregateId.length > MAX_AGGREGATE_ID_LENGTH) return undefined;
  return { aggregateType, aggregateId };
}

export function isAggregateKey(key: unknown): key is string {
  return typeof key === 'string' && splitAggregateKey(key) !== undefined;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  try {
    const text = JSON.stringify(value) ?? String(value);
    return text.length > 80 ? `${text.slice(0, 77)}...` : text;
  } catch {
    return typeof value;
  }
}

/**
 * The lane (0..lanes-1) of an aggregate key: FNV-1a over its UTF-16 code units, so that one
 * aggregate always lands in the same lane and keys spread evenly whatever their shape.
 */
export function laneOf(key: string, lanes: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i += 1) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % lanes;
}
