import { keys } from '../../outbox/redis/keys.js';
import { partitionOf, type Partitions } from '../../outbox/redis/partitions.js';
import { requeueParked } from '../../outbox/redis/scripts.js';
import type { AppliedSeqBehind } from '../verify/verify.js';

/**
 * Gives each aggregate whose applied seq Redis lost while keeping its events' processed entries
 * (`Ledger.figures.seqBehind`) the last seq those entries show applied, and queues the event parked
 * right after it again, its own successors following it as it is applied. Nothing is applied again:
 * the processed entries are the effects' own record, written in the same script. An applied seq
 * already at or past that seq is left as it is (the consumer got there meanwhile).
 */
export async function raiseAppliedSeqs(partitions: Partitions, behind: AppliedSeqBehind[]): Promise<{ aggregates: number; requeued: number }> {
  const done = { aggregates: 0, requeued: 0 };
  for (const { aggregate, throughSeq } of behind) {
    const redis = partitions.clients[partitionOf(aggregate, partitions.count)];
    const applied = Number((await redis.hget(keys.appliedSeq, aggregate)) ?? 0);
    if (!(applied < throughSeq)) continue;
    await redis.hset(keys.appliedSeq, aggregate, String(throughSeq));
    done.aggregates += 1;
    if ((await requeueParked(redis, `${aggregate}:${throughSeq + 1}`)) === 'moved') done.requeued += 1;
  }
  return done;
}
