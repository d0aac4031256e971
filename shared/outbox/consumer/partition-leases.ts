import { randomBytes } from 'node:crypto';
import { ConfigError } from '../errors/config-error.js';
import type { Logger } from '../logger.js';
import type { Partitions } from '../redis/partitions.js';
import { checkPartitionLayout } from '../redis/partition-layout.js';
import { keys } from '../redis/keys.js';
import { consumerMembers, partitionLease } from '../redis/scripts.js';
import { within } from '../sleep.js';
import { reclaimOrphans } from './orphans.js';

export const DEFAULT_PARTITION_LEASE_MS = 5000;

/** A consumer running on one partition (run-consumer.ts's `startConsumer`). */
export interface PartitionRun {
  stop(): Promise<void>;
}

export interface PartitionLeaseOptions {
  consumerId: string;
  /** How long a lease (and a membership) lasts without renewal, ms; renewed every fifth of it. Default 5000. */
  leaseMs?: number;
  log: Logger;
  /**
   * Starts consuming partition `index` (its lease was just taken). `heldUntil` tells, at any time,
   * when its lease ends at the latest as far as this consumer knows: the last acquire or renewal
   * that succeeded, as sent, plus the lease.
   */
  start(index: number, heldUntil: () => number): PartitionRun | Promise<PartitionRun>;
  /** Told whenever the set of partitions held changes. */
  onChange?: (held: number[]) => void;
}

/** Partition `index`'s consumer among `members` (sorted): spread round-robin, so P/N each (one more for some). */
export function assignedOwner(members: readonly string[], index: number): string | undefined {
  return members.length === 0 ? undefined : members[index % members.length];
}

/**
 * Shares the partitions among the consumers that run: each consumer says it is alive (a sorted
 * set in partition 0, Redis's clock) and takes the leases of the partitions assigned to it
 * (round-robin over the members sorted by name), renewing them; it lets go of the ones assigned to
 * another member (a consumer that joined: rebalancing). When a consumer dies, its membership and its
 * leases expire within `leaseMs`; the others then take its partitions, and the one that takes a
 * partition moves the in-flight messages of every other consumer of it back to the head of its queue
 * at once (a consumer that was only slow finds them gone when it applies them: 'stale', nothing
 * done; duplicates, never loss). Every call of a round is bounded and the partitions are stepped at
 * once, so a master that is down holds up only its own partitions; while partition 0 does not
 * answer, the members are this consumer and the owners of the leases it can read.
 *
 * Every round first checks that Redis holds the partitions for this number of partitions (the
 * check at start passes on a Redis no relay claimed yet): one that holds another number leaves the
 * members and lets go of every partition, so the others share them all, and says why once (the
 * start's one-line refusal); it joins again only once the layout is read and matches.
 */
export function startPartitionLeases(partitions: Partitions, options: PartitionLeaseOptions) {
  const leaseMs = options.leaseMs ?? DEFAULT_PARTITION_LEASE_MS;
  const owner = `${options.consumerId}#${randomBytes(4).toString('hex')}`;
  const { log } = options;
  const held = new Map<number, PartitionRun>();
  /** When each lease held was last acquired or renewed, as sent (Redis counts its TTL from later). */
  const renewedAt = new Map<number, number>();
  const heldUntil = (index: number) => (renewedAt.get(index) ?? 0) + leaseMs;
  let members: string[] = [owner];
  let lastTickAt = Date.now();
  let stopped = false;
  let ticking: Promise<void> = Promise.resolve();
  let refused: string | undefined;
  /** Bound of one call of a round (see `within`). */
  const bound = Math.max(50, Math.floor(leaseMs / 8));
  /** The step under way on each partition (see `tick`). */
  const stepping = new Map<number, Promise<void>>();

  const changed = () => options.onChange?.([...held.keys()].sort((a, b) => a - b));

  async function letGo(index: number, why: string): Promise<void> {
    const run = held.get(index);
    if (!run) return;
    held.delete(index);
    renewedAt.delete(index);
    await run.stop().catch((error: Error) => log.warn('cannot stop consuming a partition cleanly', { partition: index, error: error.message }));
    await partitionLease(partitions.clients[index], 'release', owner, leaseMs).catch(() => {});
    log.info('partition released', { partition: index, why });
  }

  async function take(index: number): Promise<void> {
    const redis = partitions.clients[index];
    const sentAt = Date.now();
    if (!(await partitionLease(redis, 'acquire', owner, leaseMs))) return;
    // A step that outlived its bound can end after stop(): it must not start consuming then.
    if (stopped) {
      await partitionLease(redis, 'release', owner, leaseMs).catch(() => {});
      return;
    }
    const reclaimed = await reclaimOrphans(redis, options.consumerId, log, { all: true, scan: true });
    renewedAt.set(index, sentAt);
    held.set(index, await options.start(index, () => heldUntil(index)));
    log.info('partition taken', { partition: index, reclaimed });
  }

  /** The refusal when Redis holds another number of partitions; 'matches', or 'unknown' when it cannot be read now. */
  async function layoutNow(): Promise<ConfigError | 'matches' | 'unknown'> {
    return checkPartitionLayout(partitions).then(
      () => 'matches' as const,
      (error: Error) => (error instanceof ConfigError ? error : ('unknown' as const)),
    );
  }

  /** Joins the members (renewing the membership): the members, or undefined when partition 0 does not answer in time. */
  async function join(): Promise<string[] | undefined> {
    return within(consumerMembers(partitions.clients[0], 'join', owner, leaseMs), bound).catch(() => undefined);
  }

  /**
   * One partition's step of a round: lets go of it (assigned to another member, or its lease
   * lost), renews it, or takes it (assigned here); resolves whether the partitions held changed.
   */
  async function step(index: number): Promise<boolean> {
    const mine = assignedOwner(members, index) === owner;
    const redis = partitions.clients[index];
    try {
      if (held.has(index)) {
        if (!mine) {
          await letGo(index, 'assigned to another consumer');
          return true;
        }
        const sentAt = Date.now();
        if (!(await partitionLease(redis, 'renew', owner, leaseMs))) {
          // Expired while this process was stalled, and another consumer may hold it now.
          await letGo(index, 'lease lost');
          return true;
        }
        if (held.has(index)) renewedAt.set(index, sentAt);
        return false;
      }
      if (!mine) return false;
      await take(index);
      return held.has(index);
    } catch (error) {
      log.warn('cannot renew or take a partition lease, will retry', { partition: index, error: (error as Error).message });
      return false;
    }
  }

  /**
   * The members when partition 0 does not answer (its master down): this consumer and the owners
   * of the leases it can read. A consumer that died meanwhile lets its leases expire, so its
   * partitions on the masters still up are taken over instead of waiting for partition 0.
   */
  async function membersFromLeases(): Promise<string[]> {
    const owners = await Promise.all(partitions.clients.map((redis) => within(redis.get(keys.partitionLease), bound).catch(() => null)));
    return [...new Set([owner, ...owners.filter((o): o is string => o !== null)])].sort();
  }

  async function tick(): Promise<void> {
    // Bounded: a call to a master that is down can wait as long as it is down. The check and the
    // membership at once, except while refused: a refused consumer that joined every round, if
    // only until the check's answer, would show up among the members of the others' rounds, which
    // would hand it partitions and take them back, round after round.
    let [layout, read] = await Promise.all([
      within(layoutNow(), bound).catch(() => 'unknown' as const),
      refused === undefined ? join() : Promise.resolve(undefined),
    ]);
    // Refused stays refused until the layout is read and matches (not while it cannot be read).
    if (layout instanceof ConfigError || (layout === 'unknown' && refused !== undefined)) {
      if (layout instanceof ConfigError && refused !== layout.message) log.error(layout.message, { consumerId: options.consumerId });
      if (layout instanceof ConfigError) refused = layout.message;
      const had = held.size > 0;
      for (const index of [...held.keys()]) await letGo(index, 'Redis holds another number of partitions');
      await within(consumerMembers(partitions.clients[0], 'leave', owner, leaseMs), bound).catch(() => {});
      lastTickAt = Date.now();
      if (had) changed();
      return;
    }
    if (refused !== undefined) {
      log.info('Redis holds this number of partitions again: taking partitions');
      refused = undefined;
      read = await join();
    }
    members = read ?? (await membersFromLeases());
    if (!members.includes(owner)) members = [...members, owner].sort();
    lastTickAt = Date.now();
    // The partitions at once, each step bounded: one on a master that is down does not hold up the
    // renewals of the others. A step that outlives its bound goes on alone; its partition is
    // skipped until it ends (never two steps on one partition).
    let change = false;
    let late = false;
    const steps: Promise<void>[] = [];
    for (let index = 0; index < partitions.count && !stopped; index += 1) {
      if (stepping.has(index)) continue;
      const running = step(index).then((changedHere) => {
        change ||= changedHere;
        if (changedHere && late) changed();
      });
      stepping.set(index, running.finally(() => stepping.delete(index)));
      steps.push(within(running, bound).catch(() => {}));
    }
    await Promise.all(steps);
    late = true;
    if (change) changed();
  }

  const every = Math.max(50, Math.floor(leaseMs / 5));
  const loop = async () => {
    while (!stopped) {
      ticking = tick().catch((error: Error) => log.warn('partition leases: a round failed', { error: error.message }));
      await ticking;
      if (!stopped) await new Promise((resolve) => setTimeout(resolve, every).unref?.());
    }
  };
  const running = loop();

  return {
    owner,
    /** The partitions this consumer holds now. */
    held: (): number[] => [...held.keys()].sort((a, b) => a - b),
    /** Ms since the last round of renewals (the consumer's own liveness). */
    sinceTickMs: (): number => Date.now() - lastTickAt,
    /** Stops consuming every partition (each hands its in-flight messages back), releases the leases, leaves the members. */
    async stop(): Promise<void> {
      stopped = true;
      await ticking;
      await running;
      await within(Promise.all(stepping.values()), leaseMs).catch(() => {});
      for (const index of [...held.keys()]) await letGo(index, 'consumer stopping');
      await consumerMembers(partitions.clients[0], 'leave', owner, leaseMs).catch(() => {});
      changed();
    },
  };
}

export type PartitionLeases = ReturnType<typeof startPartitionLeases>;
