import { keys } from '../../outbox/redis/keys.js';
import { readGuard } from '../../outbox/redis/guards.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { raiseAppliedSeq } from '../../outbox/redis/scripts.js';
import type { PrunedBehind } from '../verify/verify.js';

/**
 * Gives each aggregate whose applied seq fell behind its pruned seq (Redis restored from an older
 * copy after a prune) that pruned seq, as the rebuild does: the pruned events' effects are gone
 * and are counted in the meta hash's `unrecoverable` (verify keeps naming them), and the event
 * parked right after them is queued again, its own successors following it as it is applied.
 * Nothing else raises such an applied seq: the pruned events can never be delivered again.
 */
export async function restorePrunedSeqs(partitions: Partitions, behind: PrunedBehind[]): Promise<{ aggregates: number; events: number; requeued: number }> {
  const done = { aggregates: 0, events: 0, requeued: 0 };
  for (const { aggregate, fromSeq, throughSeq } of behind) {
    const redis = partitions.clients[partitions.indexOf(aggregate)];
    const applied = Number((await readGuard(redis, aggregate)) ?? 0);
    if (!(applied < throughSeq)) continue;
    const { raised, requeued } = await raiseAppliedSeq(redis, aggregate, throughSeq);
    if (!raised) continue;
    const events = throughSeq - Math.max(applied + 1, fromSeq) + 1;
    await redis.hincrby(keys.meta, 'unrecoverable', events);
    done.aggregates += 1;
    done.events += events;
    if (requeued === 'moved') done.requeued += 1;
  }
  return done;
}
