import type { Redis } from 'ioredis';
import { keys } from './keys.js';
import { scanKeys } from './scan-keys.js';

/**
 * The name of every consumer's processing list, found by scanning the keyspace: complete, at the
 * price of a SCAN over every key (the dedupe markers included: a week of them at 3 events/s is 2
 * million keys, 1.3 s of Redis's CPU). verify scans only when what the recorded lists hold leaves
 * an event unaccounted for; a consumer scans when it starts, takes a partition, and once an hour.
 */
export function processingLists(redis: Redis): AsyncGenerator<string> {
  return scanKeys(redis, keys.processingPattern);
}

/**
 * The processing lists every take recorded (`keys.processingLists`), in one SMEMBERS: what a
 * running consumer, `status` and `verify` read, where a SCAN would cost Redis about 0.7 ms per
 * 1,000 keys it holds. Every list a live consumer takes into is in it: the take script adds its
 * list in the step that moves the messages. A list it does not name belongs to a consumer that
 * died after the set was lost, or before the set existed; the next consumer's scan records it.
 */
export async function recordedProcessingLists(redis: Redis): Promise<string[]> {
  return redis.smembers(keys.processingLists);
}

/** `processingLists`, collected. */
export async function scannedProcessingLists(redis: Redis): Promise<string[]> {
  const lists: string[] = [];
  for await (const list of processingLists(redis)) lists.push(list);
  return lists;
}
