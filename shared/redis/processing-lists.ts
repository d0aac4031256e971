import type { Redis } from 'ioredis';
import { keys } from './keys.js';

/** The name of every consumer's processing list. */
export async function* processingLists(redis: Redis): AsyncGenerator<string> {
  for await (const batch of redis.scanStream({ match: keys.processingPattern, count: 1000 })) yield* batch as string[];
}
