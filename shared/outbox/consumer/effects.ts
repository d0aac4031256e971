/**
 * Redis effects as data: what a pure handler returns instead of writing to Redis itself. The apply
 * script (redis/lua/apply-events-14.lua) applies an event's effects in the same step as its dedupe
 * marker, its `processed` entry and its ack, so they happen once or not at all.
 *
 * Keys are relative to the namespace: the connection's key prefix is put in front of them like in
 * front of every key of the project. The project's own keys are refused.
 */
export type RedisEffect =
  | { op: 'hincrby'; key: string; field: string; by: number }
  | { op: 'hset'; key: string; field: string; value: string }
  | { op: 'hdel'; key: string; field: string }
  | { op: 'sadd'; key: string; member: string }
  | { op: 'srem'; key: string; member: string }
  | { op: 'zincrby'; key: string; member: string; by: number }
  | { op: 'set'; key: string; value: string };

export type RedisEffectOp = RedisEffect['op'];

/** The builders, so that a handler reads `effect.hincrby('inventory:reserved', sku, qty)`. */
export const effect = {
  /** HINCRBY key field by: `by` a safe integer, the result too. */
  hincrby: (key: string, field: string, by: number): RedisEffect => ({ op: 'hincrby', key, field, by }),
  hset: (key: string, field: string, value: string): RedisEffect => ({ op: 'hset', key, field, value }),
  hdel: (key: string, field: string): RedisEffect => ({ op: 'hdel', key, field }),
  sadd: (key: string, member: string): RedisEffect => ({ op: 'sadd', key, member }),
  srem: (key: string, member: string): RedisEffect => ({ op: 'srem', key, member }),
  /** ZINCRBY key by member: `by` a finite number. */
  zincrby: (key: string, member: string, by: number): RedisEffect => ({ op: 'zincrby', key, member, by }),
  set: (key: string, value: string): RedisEffect => ({ op: 'set', key, value }),
} as const;

/** The longest key, field, member or value an effect may carry (bytes of UTF-16 text, roughly): Redis allows more, a handler should not need it. */
const MAX_TEXT = 64 * 1024;

/**
 * The project's own keys (relative to the namespace): an effect may not touch them. Checked here
 * and again in the apply script, which is what guarantees it.
 */
export function isProjectKey(key: string): boolean {
  return key.startsWith('outbox') || key === 'processed' || key.startsWith('bull:');
}

function text(value: unknown, what: string): string {
  if (typeof value !== 'string') throw new Error(`${what} must be a string`);
  if (value.length > MAX_TEXT) throw new Error(`${what} is longer than ${MAX_TEXT} characters`);
  return value;
}

/**
 * The four values the apply script reads for one effect: op, key, field or member ('' for set),
 * value ('' for hdel, srem). Throws, with the reason, for an effect the script would refuse.
 */
export function encodeEffect(e: RedisEffect): [string, string, string, string] {
  if (typeof e !== 'object' || e === null) throw new Error('an effect must be an object made by effect.<op>(...)');
  const key = text(e.key, `${e.op} key`);
  if (key === '') throw new Error(`${e.op} key must not be empty`);
  if (isProjectKey(key)) throw new Error(`${e.op} on "${key}": effects may not touch the outbox's own keys (outbox*, processed, bull:*); pick another key`);
  switch (e.op) {
    case 'hincrby':
      if (!Number.isSafeInteger(e.by)) throw new Error(`hincrby ${key} ${e.field}: by must be a safe integer, got ${e.by}`);
      return ['hincrby', key, text(e.field, 'hincrby field'), String(e.by)];
    case 'zincrby':
      if (typeof e.by !== 'number' || !Number.isFinite(e.by)) throw new Error(`zincrby ${key} ${e.member}: by must be a finite number, got ${e.by}`);
      return ['zincrby', key, text(e.member, 'zincrby member'), String(e.by)];
    case 'hset':
      return ['hset', key, text(e.field, 'hset field'), text(e.value, 'hset value')];
    case 'hdel':
      return ['hdel', key, text(e.field, 'hdel field'), ''];
    case 'sadd':
    case 'srem':
      return [e.op, key, text(e.member, `${e.op} member`), ''];
    case 'set':
      return ['set', key, '', text(e.value, 'set value')];
    default:
      throw new Error(`unknown effect op ${JSON.stringify((e as { op: unknown }).op)}: use effect.<op>(...)`);
  }
}
