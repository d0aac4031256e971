import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import { keys } from '../redis/keys.js';
import { recordedProcessingLists, scannedProcessingLists } from '../redis/processing-lists.js';

/**
 * Moves every message of a processing list whose consumer shows no heartbeat back to the head of
 * the queue, in order (a consumer SIGKILLed and never started again under its id). A consumer that
 * was only slow finds its messages gone when it applies them ('stale'): duplicates, never loss.
 * `all`: every other consumer's list, heartbeat or not (a consumer that just took a partition's
 * lease: whoever consumed it before lost the lease).
 *
 * The lists are those the takes recorded (`keys.processingLists`), read in one SMEMBERS: this runs
 * every 10 s in every consumer, and a SCAN over a week of dedupe markers (2 million keys at 3
 * events/s) cost Redis 1.3 s of CPU a pass. `scan`: the keyspace is scanned instead, and each list
 * found is recorded: what a consumer does when it starts, takes a partition, and once an hour,
 * for a list the set does not name (written before the set existed, or after it was lost, by a
 * consumer that died before its next take recorded it again).
 */
export async function reclaimOrphans(redis: Redis, ownId: string, log?: Logger, { all = false, scan = false } = {}): Promise<number> {
  let reclaimed = 0;
  const lists = scan ? await scannedProcessingLists(redis) : await recordedProcessingLists(redis);
  if (scan && lists.length > 0) await redis.sadd(keys.processingLists, ...lists);
  for (const list of lists) {
    const owner = list.slice(keys.processing('').length);
    if (owner === ownId || (!all && (await redis.exists(keys.consumerAlive(owner))) === 1)) continue;
    let moved = 0;
    while ((await redis.lmove(list, keys.events, 'RIGHT', 'LEFT')) !== null) moved += 1;
    if (moved > 0) log?.warn('reclaimed the processing list of a consumer that is gone', { processingList: list, count: moved });
    reclaimed += moved;
  }
  return reclaimed;
}
