/**
 * Every Redis key this project uses. The first two names are the seed's own. In a namespace
 * (`--namespace` / `OUTBOX_NAMESPACE`) each gets `<namespace>:` in front, added by the connection
 * (see connectRedis), so code always names them as below.
 */
export const keys = {
  /** List: the event queue. The relay RPUSHes, consumers LMOVE from the left. */
  events: 'outbox.events',
  /** Hash event_id -> JSON result: one field per event applied. */
  processed: 'processed',
  /** Counter: every message the relay ever pushed, duplicates included. */
  enqueued: 'outbox:enqueued',
  /** List: one consumer's in-flight messages; recovered when that consumer starts again. */
  processing: (consumerId: string) => `outbox.events:processing:${consumerId}`,
  /** String with a TTL: consumer `consumerId` is alive while it exists. */
  consumerAlive: (consumerId: string) => `outbox:consumer-alive:${consumerId}`,
  /**
   * Hash consumer id -> JSON {pid, at, applied, lagMs, queued, health, stoppedAt?}: each consumer
   * app's last heartbeat, for `outbox status`. Entries of consumers that are gone stay (shown stale).
   */
  consumers: 'outbox:consumers',
  /** Pattern matching every consumer's processing list. */
  processingPattern: 'outbox.events:processing:*',
  /**
   * Set: the name of every processing list a consumer took into, recorded by each take
   * (move-to-processing-3.lua). The consumers' reclaim of a dead consumer's list reads it every 10 s
   * instead of scanning the keyspace, which the dedupe markers fill (a week of events); it scans at
   * start, on a partition's take and once an hour (consumer/orphans.ts). status reads it too, and
   * so does verify, which scans only for an event the lists it names leave unaccounted for.
   */
  processingLists: 'outbox:processing-lists',
  /** String, SET NX: the dedupe marker of one event. */
  seen: (eventId: string) => `outbox:seen:${eventId}`,
  /**
   * Hash event_id -> how many times its effect was applied, written in the same step as the effect:
   * the evidence `verify` and chaos read for "applied twice" (1 everywhere, or something is wrong).
   */
  applyCount: 'outbox:apply-count',
  /**
   * List: per applied batch, `t<appliedAt ms>` then `e<event_id>` for each event applied in it. The
   * window's sweep reads it from the head to drop the records of events applied before the window.
   */
  appliedLog: 'outbox:applied-log',
  /**
   * Hash {windowMs, sweptEvents, sweptThrough}: the dedupe window, how many events' records its
   * sweeps dropped, and the apply time up to which they did (dedupe-window.ts).
   */
  window: 'outbox:window',
  /**
   * List, with an aggregate horizon: per applied batch `t<appliedAt ms>` then `a<seq> <aggregate>`
   * per event. The horizon's sweep reads it to drop the guards of aggregates idle past it.
   */
  aggregateLog: 'outbox:aggregate-log',
  /** Hash aggregate_id -> last applied seq. */
  appliedSeq: 'outbox:applied-seq',
  /**
   * Set: the full name of every key an effect wrote, recorded in the same step. A Redis that lost
   * its meta hash but kept effects has them deleted before the rebuild applies every event again.
   */
  effectKeys: 'outbox:effect-keys',
  /** Hash "<aggregate_id>:<seq>" -> JSON {reason, message, parkedAt}: events that arrived ahead of a gap. */
  parked: 'outbox.events:parked',
  /** List of JSON {reason, message, deadAt}: entries that are not valid events. */
  deadLetter: 'outbox.events:dead',
  /**
   * Hash event_id -> failed handler attempts, for events that wait in a processing list for their
   * next attempt (so the count survives a consumer restart). Cleared once the event is applied or
   * dead-lettered.
   */
  attempts: 'outbox:attempts',
  /** Hash of counters: applied, duplicates, parked, unparked, dead, handlerFailures. */
  stats: 'outbox:stats',
  /** String with a TTL, in each partition: the consumer (id and run token) that holds the partition's lease. */
  partitionLease: 'outbox:partition-lease',
  /** Sorted set, in partition 0: the consumers sharing the partitions, each until when it counts as alive. */
  consumerMembers: 'outbox:consumer-members',
  /** Hash {at, jobId, events, batches, durationMs}: the relay app's last finished job. */
  relayLastRun: 'outbox:relay:last-run',
  /**
   * Hash: which store (app.db's store id) this Redis serves, and what happened to it: {store,
   * claimedAt, rebuilds, rebuiltAt, rebuiltEvents, unrecoverable}. Gone means Redis lost its state.
   */
  meta: 'outbox:meta',
  /** List the `dualwrite` demo publishes to (kept apart from the real queue). */
  dualwriteEvents: 'outbox.dualwrite.events',
} as const;

/** The BullMQ key prefix: `bull`, or `<namespace>:bull`. */
export function bullPrefixOf(keyPrefix: string): string {
  return `${keyPrefix}bull`;
}

/**
 * SCAN patterns (relative to the namespace) covering every key above and the BullMQ queues, for
 * `outbox init --force` (which also deletes the keys `keys.effectKeys` names). In a namespace
 * everything under it is this deployment's.
 */
export function projectKeyPatterns(keyPrefix: string): string[] {
  if (keyPrefix !== '') return ['*'];
  return ['outbox.*', 'outbox:*', keys.processed, 'bull:outbox-relay:*', 'bull:outbox-prune:*'];
}
