import type { Redis } from 'ioredis';
import { eventIdOf } from '../../outbox/store/events.js';
import { keys } from '../../outbox/redis/keys.js';
import { readList } from '../../outbox/redis/read-list.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';

export interface Duplicate {
  eventId: string;
  count: number;
}

/**
 * Reads `outbox.events` without consuming it; resolves every event_id present more than once, in
 * queue order. With partitions, every partition's queue, one after the other (an event is pushed to
 * its aggregate's partition only).
 */
export async function findDuplicates(redis: Redis | Partitions): Promise<{ events: number; duplicates: Duplicate[] }> {
  const counts = new Map<string, number>();
  let events = 0;
  for (const client of partitionsOf(redis).clients) {
    for await (const raw of readList(client, keys.events)) {
      const id = eventIdOf(raw);
      if (id === undefined) continue;
      events += 1;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
  }
  const duplicates = [...counts].filter(([, count]) => count > 1).map(([eventId, count]) => ({ eventId, count }));
  return { events, duplicates };
}

/** The lines of atleastonce.out. */
export function formatDuplicates(duplicates: Duplicate[]): string[] {
  if (duplicates.length === 0) return ['NO DUPLICATE'];
  return duplicates.map((d) => `DUPLICATE event_id=${d.eventId} count=${d.count}`);
}
