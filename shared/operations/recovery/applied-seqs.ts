import type { Partitions } from '../../outbox/redis/partitions.js';
import { raiseAppliedSeq, requeueParked } from '../../outbox/redis/scripts.js';
import type { AppliedSeqBehind } from '../verify/verify.js';

/**
 * Gives each aggregate whose applied seq Redis lost while keeping its events' processed entries
 * (`Ledger.figures.seqBehind`) the last seq those entries show applied, and queues the event parked
 * right after it again, its own successors following it as it is applied (lua/raise-applied-seq-4.lua:
 * one atomic step, which never lowers an applied seq a consumer raised meanwhile). Nothing is
 * applied again: the processed entries are the effects' own record, written in the same script.
 */
export async function raiseAppliedSeqs(partitions: Partitions, behind: AppliedSeqBehind[]): Promise<{ aggregates: number; requeued: number }> {
  const done = { aggregates: 0, requeued: 0 };
  for (const { aggregate, throughSeq } of behind) {
    const { raised, requeued } = await raiseAppliedSeq(partitions.clients[partitions.indexOf(aggregate)], aggregate, throughSeq);
    if (raised) done.aggregates += 1;
    if (requeued === 'moved') done.requeued += 1;
  }
  return done;
}

/**
 * Queues again the parked events that wait for nothing (`Ledger.figures.releasable`: "<aggregate>:<seq>"
 * fields whose aggregate's applied seq has reached seq - 1), each to the head of its partition's
 * queue (lua/requeue-parked-2.lua: a field already gone, released meanwhile, is left alone).
 */
export async function requeueReleasable(partitions: Partitions, fields: string[]): Promise<number> {
  let requeued = 0;
  for (const field of fields) {
    const aggregate = field.slice(0, field.lastIndexOf(':'));
    if ((await requeueParked(partitions.clients[partitions.indexOf(aggregate)], field)) === 'moved') requeued += 1;
  }
  return requeued;
}
