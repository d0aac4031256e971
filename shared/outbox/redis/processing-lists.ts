import type { Redis } from 'ioredis';
import { keys } from './keys.js';
import { scanKeys } from './scan-keys.js';

/**
 * The name of every consumer's processing list, found by scanning the keyspace: complete, as
 * verify and status need it, at the price of a SCAN over every key (the dedupe markers included).
 */
export function processingLists(redis: Redis): AsyncGenerator<string> {
  return scanKeys(redis, keys.processingPattern);
}

/**
 * The processing lists every take recorded (`keys.processingLists`), in one SMEMBERS: what a
 * running consumer reads, every few seconds, where a SCAN would cost Redis about 0.7 ms per 1,000
 * keys it holds.
 */
export async function recordedProcessingLists(redis: Redis): Promise<string[]> {
  return redis.smembers(keys.processingLists);
}
