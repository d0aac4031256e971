import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { storeIdOf } from '../../outbox/store/store-meta.js';
import { keys } from '../../outbox/redis/keys.js';

export interface Rate {
  count: number;
  ms: number;
  /** count per second */
  perSecond: number;
}

export function rate(count: number, ms: number): Rate {
  return { count, ms, perSecond: ms > 0 ? (count * 1000) / ms : 0 };
}

/** Times `fn`, which processes `count` items. */
export async function timed(count: number, fn: () => unknown): Promise<Rate> {
  const started = performance.now();
  await fn();
  return rate(count, performance.now() - started);
}

/** The median by `perSecond` of several rounds: one slow round (a GC, the other core busy) does not decide. */
export function median(rounds: Rate[]): Rate {
  return [...rounds].sort((a, b) => a.perSecond - b.perSecond)[Math.floor(rounds.length / 2)];
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * Makes the bench's Redis serve the store of `db`. The stages use several databases against one
 * Redis; a real deployment pairs one with one (see relay/store-pairing.ts).
 */
export async function serveStore(redis: Redis, db: Db): Promise<void> {
  // The bench moves one Redis between its databases: what another one pushed (the highest row it
  // recorded) is not this store's history, and its relay would refuse it as a store behind Redis.
  await redis.multi().hdel(keys.meta, 'pushedId', 'pushedEvent', 'pushedAggregate', 'pushedSeq', 'latestId', 'latestEvent', 'latestAggregate', 'latestSeq').hset(keys.meta, 'store', storeIdOf(db)).exec();
}
