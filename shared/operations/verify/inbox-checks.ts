import type { Redis } from 'ioredis';
import { keys } from '../../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { Db } from '../../outbox/store/open-database.js';
import type { InvariantCheck } from '../../outbox/verify/verify-checks.js';

const EXAMPLES = 5;

/** Every field of a hash, by HSCAN (no single reply of a million fields). */
async function hashFields(redis: Redis, key: string): Promise<Set<string>> {
  const fields = new Set<string>();
  let cursor = '0';
  do {
    const [next, entries] = await redis.hscan(key, cursor, 'COUNT', 1000);
    for (let i = 0; i < entries.length; i += 2) fields.add(entries[i]);
    cursor = next;
  } while (cursor !== '0');
  return fields;
}

/**
 * Database mode's invariant, between Redis and the consumer's own database: every event Redis
 * records as processed has exactly one inbox row (its primary key makes it at most one), so its
 * effect is in the database. An inbox row whose event is not processed yet is in flight: its
 * process died after the commit, and the next attempt (after the lease) completes it.
 */
export async function inboxChecks(consumerDb: Db, redis: Redis | Partitions): Promise<InvariantCheck[]> {
  // Processed first: an event completed between the two reads then shows as in flight, never as
  // missing (its inbox row was committed before Redis recorded it). Every partition's.
  const processed = new Set((await Promise.all(partitionsOf(redis).clients.map((client) => hashFields(client, keys.processed)))).flatMap((fields) => [...fields]));
  const inbox = new Set(consumerDb.prepare('SELECT event_id FROM outbox_inbox').pluck().all() as string[]);
  const missing = [...processed].filter((id) => !inbox.has(id));
  const pending = [...inbox].filter((id) => !processed.has(id));
  return [
    {
      name: 'processed events without an inbox row (effect missing from the consumer database)',
      expected: '0',
      actual: String(missing.length),
      status: missing.length === 0 ? 'ok' : 'FAIL',
      examples: missing.length === 0 ? undefined : missing.slice(0, EXAMPLES),
    },
    { name: 'inbox rows / of them committed, completion pending', expected: '-', actual: `${inbox.size} / ${pending.length}`, status: 'info' },
  ];
}
