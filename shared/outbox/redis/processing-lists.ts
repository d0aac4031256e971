import type { Redis } from 'ioredis';
import { keys } from './keys.js';
import { scanKeys } from './scan-keys.js';

/** The name of every consumer's processing list. */
export function processingLists(redis: Redis): AsyncGenerator<string> {
  return scanKeys(redis, keys.processingPattern);
}
