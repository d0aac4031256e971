import assert from 'node:assert/strict';
import { after, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../shared/outbox/redis/connect-partitions.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { type Partitions } from '../shared/outbox/redis/partitions.js';
import { claimStore, consumerMembers, moveToProcessing, partitionLease, pushEvents } from '../shared/outbox/redis/scripts.js';
import { createConsumer, defineEvents, defineRedisHandlers, effect } from '../shared/outbox/index.js';
import { partitionLayout, partitionOf } from '../shared/outbox/redis/partitions.js';
import { scanKeys, unlinkAll } from '../shared/outbox/redis/scan-keys.js';
import { z } from 'zod';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { ledgerHolds, partitionLedger } from '../shared/tooling/chaos/partition-ledger.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { createLogger } from '../shared/outbox/logger.js';
import { startApp, stopApp, stopApps, type App } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { usePartitions } from './helpers/partitions.js';
import { monitorWhile } from './helpers/redis-monitor.js';
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.js';
import { Redis } from 'ioredis';
import { slotOf } from '../shared/outbox/redis/cluster-client.js';
import { before } from 'node:test';
import { createPgLabSchema, createPgOrderService } from '../shared/lab/orders/pg-order-service.js';
import { usePostgres } from './helpers/postgres.js';
import { guardsOf } from './helpers/guards.js';

// Faults against the partition leases (app.db, one Redis, 3 partitions, real app processes and
// real signals): a consumer frozen past its lease, two consumers with one id, a consumer dead right
// after taking a lease, consumers configured for another number of partitions than the relay.
const h = useHarness({ init: false });
// The cluster cases: the relay app on a cluster runs on PostgreSQL (app.db's relay is one Redis's BullMQ job).
const pgdb = usePostgres();
const PARTITIONS = 3;
const LEASE = '1s';

const partitions = usePartitions(h, PARTITIONS);

const env = (extra: Record<string, string> = {}) => ({ OUTBOX_PARTITIONS: String(PARTITIONS), OUTBOX_PARTITION_LEASE: LEASE, OUTBOX_HANDLER_THREADS: '1', OUTBOX_RELAY_EVERY: '200ms', ...extra });
const relayApp = (extra: Record<string, string> = {}) => startApp(h.env, 'dist/apps/relay/main.js', [], env(extra));
const consumerApp = (id: string, extra: Record<string, string> = {}) => startApp(h.env, 'dist/apps/consumer/main.js', [], env({ OUTBOX_CONSUMER_ID: id, ...extra }));

const started = (app: App) => waitFor(() => /"msg":"(relay|consumer) started"/.test(app.output()), { timeoutMs: 20_000, message: app.output() });
/** The owner of each partition's lease ("<consumer id>#<token>"), undefined where none. */
const holders = async (on = partitions()) => Promise.all(on.clients.map(async (redis) => (await redis.get(keys.partitionLease)) ?? undefined));

/** The owners of the membership joins Redis runs within `ms` (the script's call names the owner). */
async function joinsSeenFor(ms: number): Promise<string[]> {
  const owners: string[] = [];
  await monitorWhile(h.env.redisUrl, (args) => {
    const at = args.indexOf('join');
    if (/^eval/i.test(args[0] ?? '') && at > 0 && args[at + 2]) owners.push(args[at + 2]);
  }, () => sleep(ms));
  return owners;
}

/** Resolves as soon as Redis runs a command that `matches`. */
async function commandSeen(matches: (args: string[]) => boolean, timeoutMs: number): Promise<void> {
  let seen = false;
  await monitorWhile(h.env.redisUrl, (args) => (seen ||= matches(args)), () => waitFor(() => seen, { timeoutMs, intervalMs: 1, message: 'the command was not seen' }));
}

/** Orders and their changes written a few at a time for `ms`: aggregates with many events, over every partition. */
async function traffic(ms: number): Promise<void> {
  const db = openDatabase(h.env.dir);
  try {
    const service = createOrderService(db);
    const ids = Array.from({ length: 12 }, (_, i) => service.placeOrder({ sku: `SKU-${i % 3}`, qty: 1 }).order.id);
    const until = Date.now() + ms;
    for (let round = 0; Date.now() < until; round += 1) {
      for (const id of ids) service.changeQty(id, 2 + round);
      await sleep(20);
    }
  } finally {
    db.close();
  }
}

function rows() {
  const db = openDatabase(h.env.dir);
  try {
    return db.prepare('SELECT event_id, aggregate_id, seq FROM outbox').all() as { event_id: string; aggregate_id: string; seq: number }[];
  } finally {
    db.close();
  }
}

/**
 * Waits until the ledger holds, for as long as events keep being applied (30 s without one applied:
 * stuck), then asserts it: every event applied once, in seq order per aggregate, nothing left. A
 * consumer that fell behind during a fault drains its backlog slowly on a loaded machine (2 ms of
 * handler per event, one thread), but steadily; one that lost events applies none of them.
 */
async function assertLedger(on = partitions(), read: () => Promise<ReturnType<typeof rows>> = async () => rows()): Promise<void> {
  const all = await read();
  let applied = -1;
  let appliedAt = Date.now();
  await waitFor(
    async () => {
      const ledger = await partitionLedger(all, on);
      if (all.length - ledger.lost.length > applied) [applied, appliedAt] = [all.length - ledger.lost.length, Date.now()];
      return ledgerHolds(ledger) || Date.now() - appliedAt > 30_000;
    },
    { timeoutMs: 180_000, intervalMs: 200 },
  ).catch(() => {});
  const { events, aggregates, ...faults } = await partitionLedger(all, on);
  assert.deepEqual(faults, { lost: [], appliedTwice: [], outOfOrder: [], extra: 0, deadLettered: 0, parked: 0, queued: 0 });
  assert.ok(events > 12 && aggregates >= 12, `${events} events of ${aggregates} aggregates`);
}

describe('partition leases under faults', () => {
  it('a consumer SIGSTOPped past its lease: the other takes its partitions; SIGCONTed, it lets go cleanly; every event once, in order', async () => {
    const relay = relayApp();
    // Slow handlers: rounds are in flight when the signal lands.
    const consumers = ['one', 'two'].map((id) => consumerApp(id, { OUTBOX_HANDLER_CPU: '2ms' }));
    const [one] = consumers;
    try {
      for (const app of [relay, ...consumers]) await started(app);
      await waitFor(async () => new Set((await holders()).map((o) => o?.split('#')[0])).size === 2 && !(await holders()).includes(undefined), { timeoutMs: 15_000 });
      const writing = traffic(4000);
      await sleep(1000);
      one.child.kill('SIGSTOP');
      await waitFor(async () => (await holders()).every((o) => o?.startsWith('two#')), { timeoutMs: 10_000, message: 'two did not take over' });
      await sleep(1000);
      one.child.kill('SIGCONT');
      await writing;
      await assertLedger();
      assert.match(one.output(), /"msg":"partition released"/, 'one let go of what it lost');
      // Shared again once one is back.
      await waitFor(async () => new Set((await holders()).map((o) => o?.split('#')[0])).size === 2, { timeoutMs: 15_000, message: 'the partitions were not shared again' });
    } finally {
      one.child.kill('SIGCONT');
      await stopApps([relay, ...consumers]);
    }
  });

  it('two consumers with the same id (one processing list name per partition): one SIGSTOPped past its lease, then SIGCONTed, the other SIGKILLed: every event once, in order', async () => {
    const relay = relayApp();
    const consumers = [consumerApp('twin', { OUTBOX_HANDLER_CPU: '2ms' }), consumerApp('twin', { OUTBOX_HANDLER_CPU: '2ms' })];
    const [first, second] = consumers;
    try {
      for (const app of [relay, ...consumers]) await started(app);
      await waitFor(async () => new Set(await holders()).size === 2 && !(await holders()).includes(undefined), { timeoutMs: 15_000, message: 'the partitions were not shared' });
      const writing = traffic(5000);
      await sleep(800);
      first.child.kill('SIGSTOP');
      await waitFor(async () => new Set(await holders()).size === 1 && !(await holders()).includes(undefined), { timeoutMs: 10_000, message: 'the second did not take over' });
      await sleep(800);
      first.child.kill('SIGCONT');
      await waitFor(async () => new Set(await holders()).size === 2, { timeoutMs: 15_000, message: 'not shared again' });
      await sleep(500);
      second.child.kill('SIGKILL');
      await writing;
      await assertLedger();
      await waitFor(async () => new Set(await holders()).size === 1 && !(await holders()).includes(undefined), { timeoutMs: 10_000, message: 'the first did not take every partition' });
    } finally {
      first.child.kill('SIGCONT');
      assert.equal((await stopApp(relay)).code, 0, relay.output());
      assert.equal((await stopApp(first)).code, 0, first.output());
      await stopApp(second, 'SIGKILL');
    }
  });

  it('a consumer frozen past its lease sends no take when it wakes, before its late renewal tells it the lease is gone: it lets go first, and takes again only once it holds a lease again', async () => {
    const frozen = consumerApp('a');
    const other = consumerApp('b');
    const apps = [frozen, other];
    try {
      for (const app of apps) await started(app);
      await waitFor(async () => new Set(await holders()).size === 2 && !(await holders()).includes(undefined), { timeoutMs: 10_000, message: 'the partitions were not shared' });
      frozen.child.kill('SIGSTOP');
      await waitFor(async () => (await holders()).every((o) => o?.startsWith('b#')), { timeoutMs: 10_000, message: 'the other did not take every partition' });
      // Its takes: the take script (3 keys: the queue, its processing list, the set of processing lists) and BLMOVE into that list.
      const takes: number[] = [];
      const into = /:outbox\.events:processing:a$/;
      const from = frozen.output().length;
      let wokeAt = 0;
      await monitorWhile(
        h.env.redisUrl,
        (args, atMs) => {
          if ((args[0] === 'blmove' && into.test(args[2] ?? '')) || (/^evalsha$/i.test(args[0] ?? '') && args[2] === '3' && into.test(args[4] ?? ''))) takes.push(atMs);
        },
        async () => {
          wokeAt = Date.now();
          frozen.child.kill('SIGCONT');
          await waitFor(() => /"msg":"partition taken"/.test(frozen.output().slice(from)), { timeoutMs: 15_000, message: `it did not take a partition again: ${frozen.output().slice(from)}` });
          // Until its takes on the partition it holds again have shown up.
          await waitFor(() => takes.length > 0, { timeoutMs: 5000, message: 'no take after it took a partition again' });
        },
      );
      const after = frozen.output().slice(from);
      assert.ok(after.split('\n').some((text) => text.includes('"msg":"partition released"') && text.includes('"why":"lease lost"')), after);
      const line = after.split('\n').find((text) => text.includes('"msg":"partition taken"'))!;
      const retakenAt = Date.parse((JSON.parse(line) as { time: string }).time);
      assert.deepEqual(takes.filter((at) => at >= wokeAt && at < retakenAt).map((at) => Math.round(at - wokeAt)), [], 'takes (ms after it woke) before it held a lease again');
    } finally {
      frozen.child.kill('SIGCONT');
      await stopApps(apps);
    }
  });

  it('two consumers with the same id, lease 500 ms: one SIGSTOPped just as its idle BLMOVE began, SIGKILLed once the other took its partition; the events that arrived meanwhile are applied (its wait ended before its lease)', async () => {
    const lease = { OUTBOX_PARTITION_LEASE: '500ms' };
    const relay = relayApp();
    const stopped = consumerApp('twin', lease);
    const apps = [relay, stopped];
    try {
      for (const app of apps) await started(app);
      await waitFor(async () => (await holders()).every((o) => o?.startsWith('twin#')), { timeoutMs: 10_000, message: `partitions not held: ${stopped.output()}` });
      const [stoppedOwner] = await holders();
      const other = consumerApp('twin', lease);
      apps.push(other);
      await started(other);
      await waitFor(async () => new Set(await holders()).size === 2 && !(await holders()).includes(undefined), { timeoutMs: 10_000, message: 'the partitions were not shared' });
      const p = (await holders()).indexOf(stoppedOwner);
      assert.ok(p >= 0);
      // Nothing is queued, so it waits in BLMOVE on partition p: stopped as a wait begins, that wait
      // stays in Redis as long as its timeout, and the next event on p would be its.
      await commandSeen((args) => args[0] === 'blmove' && args[1].startsWith(`{p${p}}:`), 10_000);
      stopped.child.kill('SIGSTOP');
      await waitFor(async () => ![stoppedOwner, undefined].includes((await holders())[p]), { timeoutMs: 10_000, message: 'the other did not take partition p' });
      await traffic(500);
      stopped.child.kill('SIGKILL');
      await assertLedger();
    } finally {
      stopped.child.kill('SIGKILL');
      await stopApps(apps.filter((app) => app !== stopped));
    }
  });

  it('a consumer dead right after taking a lease (its in-flight messages in its processing list, its heartbeat alive): another takes the partition once the lease expires, and its messages', async () => {
    const relay = relayApp();
    try {
      await started(relay);
      await traffic(500);
      // Everything pushed, nothing consumed.
      const all = rows();
      await waitFor(async () => (await Promise.all(partitions().clients.map((r) => r.llen(keys.events)))).reduce((a, b) => a + b, 0) === all.length, { timeoutMs: 15_000 });
      // The state a consumer SIGKILLed right after its take leaves in partition 1: its lease, its
      // membership, its heartbeat, and messages moved to its processing list.
      const p1 = partitions().clients[1];
      assert.equal(await partitionLease(p1, 'acquire', 'ghost#dead', 3000), true);
      await consumerMembers(partitions().clients[0], 'join', 'ghost#dead', 3000);
      await p1.set(keys.consumerAlive('ghost'), String(Date.now()), 'PX', 60_000);
      assert.equal((await moveToProcessing(p1, keys.processing('ghost'), 5)).length, 5);
      const one = consumerApp('one');
      try {
        await started(one);
        await waitFor(async () => (await holders()).every((o) => o?.startsWith('one#')), { timeoutMs: 10_000, message: 'one did not take the dead consumer\'s partition' });
        await assertLedger();
        assert.equal(await p1.llen(keys.processing('ghost')), 0);
      } finally {
        assert.equal((await stopApp(one)).code, 0, one.output());
      }
    } finally {
      assert.equal((await stopApp(relay)).code, 0, relay.output());
    }
  });

  it('a consumer started for 2 partitions before the relay first claimed Redis for 3: once claimed, it says so in one line and lets go of every partition, which the right consumer takes (none left unconsumed)', async () => {
    // Named to sort first: the members round-robin would give it partition 2, which it does not know.
    const wrong = consumerApp('a-wrong', { OUTBOX_PARTITIONS: '2' });
    const right = consumerApp('b-right');
    const apps = [wrong, right];
    try {
      // The relay only once both run: started earlier, its claim could come first, and the consumer
      // for 2 would be refused at start (exit 78): right too, but not the case this test is about.
      for (const app of apps) await started(app);
      const relay = relayApp();
      apps.unshift(relay);
      await started(relay);
      await traffic(500);
      await assertLedger();
      assert.match(wrong.output(), /holds partition 0\/3 \(of 3\), not 0\/2: set --partitions \/ OUTBOX_PARTITIONS to 3 on every relay and consumer/);
      assert.equal(wrong.output().match(/not 0\/2: set --partitions/g)?.length, 1, 'said once');
      assert.doesNotMatch(wrong.output(), /\n\s+at /, 'no stack trace');
      // Refused, it stays out of the members: one that joined every round (if only until the
      // check's answer) would show up in the right one's rounds, which would hand it partitions
      // and take them back, again and again. Every join Redis runs for 1.5 s (7 rounds each).
      const joiners = await joinsSeenFor(1500);
      assert.ok(joiners.some((o) => o.startsWith('b-right#')), `the right consumer renews its membership: ${joiners.join(', ')}`);
      assert.deepEqual(joiners.filter((o) => o.startsWith('a-wrong#')), [], 'the refused consumer joined again');
      assert.ok((await holders()).every((o) => o?.startsWith('b-right#')), `leases: ${(await holders()).join(', ')}`);
    } finally {
      await stopApps(apps);
    }
  });

  it('a consumer for 2 partitions refused once Redis is claimed for 3 lets go of both; when Redis is claimed for 2 again, it says so and takes both back', async () => {
    const two = consumerApp('two', { OUTBOX_PARTITIONS: '2' });
    const holdersOfTwo = async () => (await holders()).slice(0, 2);
    try {
      await started(two);
      await waitFor(async () => (await holdersOfTwo()).every((o) => o?.startsWith('two#')), { timeoutMs: 10_000, message: `two never held both: ${two.output()}` });
      // Claimed for 3 (as a relay for 3 would): partitions 0 and 1 name themselves 0/3 and 1/3.
      for (let p = 0; p < PARTITIONS; p += 1) await claimStore(partitions().clients[p], 'store-layout', undefined, partitionLayout(p, PARTITIONS));
      await waitFor(async () => /holds partition 0\/3 \(of 3\), not 0\/2/.test(two.output()) && (await holdersOfTwo()).every((o) => o === undefined), {
        timeoutMs: 10_000,
        message: `two did not let go: ${two.output()}`,
      });
      // Started over for 2: every partition's keys gone, partitions 0 and 1 claimed as 0/2 and 1/2.
      for (const redis of partitions().clients) await unlinkAll(redis, scanKeys(redis, '*'));
      for (let p = 0; p < 2; p += 1) await claimStore(partitions().clients[p], 'store-layout', undefined, partitionLayout(p, 2));
      await waitFor(async () => (await holdersOfTwo()).every((o) => o?.startsWith('two#')), { timeoutMs: 10_000, message: `two did not take its partitions back: ${two.output()}` });
      assert.equal(two.output().match(/Redis holds this number of partitions again: taking partitions/g)?.length, 1, two.output());
      assert.equal(two.output().match(/not 0\/2: set --partitions/g)?.length, 1, 'said once');
    } finally {
      assert.equal((await stopApp(two)).code, 0, two.output());
    }
  });

  it(
    'a consumer started for 1 partition (no partitions: the seed\'s key names) before the relay first claimed Redis for 3: says so in one line once the partitions are claimed',
    async () => {
      const wrong = consumerApp('a-wrong', { OUTBOX_PARTITIONS: '1' });
      const apps = [wrong];
      try {
        // The relay once the consumer runs (else the consumer is refused at start: another case).
        await started(wrong);
        const relay = relayApp();
        apps.unshift(relay);
        await started(relay);
        await traffic(500);
        await waitFor(async () => /holds 3 partitions, not 1: set --partitions \/ OUTBOX_PARTITIONS to 3 on every relay and consumer/.test(wrong.output()), {
          timeoutMs: 10_000,
          message: 'the consumer for 1 partition never noticed',
        });
        await sleep(2500);
        assert.equal(wrong.output().match(/holds 3 partitions, not 1/g)?.length, 1, 'said once, not every check');
        assert.doesNotMatch(wrong.output(), /\n\s+at /, 'no stack trace');
      } finally {
        await stopApps(apps);
      }
    },
  );

  it(
    'consumers started for 3 partitions before a relay for 1 partition (no partitions) first claimed Redis: one of them says so',
    async () => {
      const consumer = consumerApp('one');
      const apps = [consumer];
      try {
        await started(consumer);
        const relay = relayApp({ OUTBOX_PARTITIONS: '1' });
        apps.unshift(relay);
        await started(relay);
        await traffic(300);
        await waitFor(() => /holds 1 partition \(a queue with the seed's key names\), not 3: set --partitions \/ OUTBOX_PARTITIONS to 1 on every relay and consumer/.test(consumer.output()), {
          timeoutMs: 10_000,
          message: `the consumer did not notice: ${consumer.output()}`,
        });
        assert.doesNotMatch(consumer.output(), /\n\s+at /, 'no stack trace');
      } finally {
        await stopApps(apps);
      }
    },
  );
});

describe('relays and consumers coming and going', () => {
  it('the relay app SIGKILLed three times under traffic (its batches spread over the 3 partitions) and started again: every event once, in order', async () => {
    const consumers = ['one', 'two'].map((id) => consumerApp(id));
    let relay = relayApp({ OUTBOX_RELAY_BATCH_SIZE: '20' });
    try {
      for (const app of [relay, ...consumers]) await started(app);
      const writing = traffic(4000);
      for (let kill = 0; kill < 3; kill += 1) {
        await sleep(600 + Math.floor(Math.random() * 400));
        relay.child.kill('SIGKILL');
        await relay.exited;
        relay = relayApp({ OUTBOX_RELAY_BATCH_SIZE: '20' });
        await started(relay);
      }
      await writing;
      await assertLedger();
    } finally {
      assert.equal((await stopApp(relay)).code, 0, relay.output());
      await stopApps(consumers);
    }
  });

  it('consumers joining and leaving quickly (SIGTERM and SIGKILL) under traffic: every partition held again within seconds, every event once, in order', async () => {
    const relay = relayApp();
    const steady = consumerApp('steady');
    const churned: App[] = [];
    try {
      for (const app of [relay, steady]) await started(app);
      const writing = traffic(5000);
      // Every partition's longest time without a lease while consumers come and go.
      const unowned = Array.from({ length: PARTITIONS }, () => ({ since: 0, longest: 0 }));
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const now = Date.now();
          (await holders()).forEach((o, p) => {
            const u = unowned[p];
            if (o !== undefined) u.since = 0;
            else if (u.since === 0) u.since = now;
            else u.longest = Math.max(u.longest, now - u.since);
          });
          await sleep(50);
        }
      })();
      for (let i = 0; i < 6; i += 1) {
        const app = consumerApp(`churn-${i % 3}`);
        churned.push(app);
        await sleep(300 + Math.floor(Math.random() * 500));
        app.child.kill(i % 2 === 0 ? 'SIGKILL' : 'SIGTERM');
        await app.exited;
      }
      await writing;
      sampling = false;
      await sampler;
      // A consumer SIGKILLed leaves its partitions for about a lease (1 s) plus a round: never much longer.
      assert.ok(unowned.every((u) => u.longest < 2_500), `longest without an owner, per partition: ${unowned.map((u) => u.longest).join(', ')} ms`);
      const t0 = Date.now();
      await waitFor(async () => (await holders()).every((o) => o?.startsWith('steady#')), { timeoutMs: 10_000, message: `leases: ${(await holders()).join(', ')}` });
      assert.ok(Date.now() - t0 < 5_000, `steady held every partition ${Date.now() - t0} ms after the churn`);
      await assertLedger();
    } finally {
      await stopApps([relay, steady]);
      for (const app of churned) await stopApp(app, 'SIGKILL');
    }
  });
});

describe('pairing when some partitions lost their state', () => {
  /** An aggregate key of the lab's kind that falls in partition `p`. */
  const aggregateIn = (p: number, from: number) => {
    for (let i = from; ; i += 1) if (partitionOf(`order:${i}`, PARTITIONS) === p) return `order:${i}`;
  };

  it('partition 1 wiped, aggregates pruned in partitions 0 and 1: only partition 1 is rebuilt, with only its own pruned seqs; every event once again', async () => {
    const apps = [relayApp(), consumerApp('one')];
    const prunedIn1 = aggregateIn(1, 90_000);
    const prunedIn0 = aggregateIn(0, 90_000);
    try {
      for (const app of apps) await started(app);
      await traffic(500);
      await assertLedger();
    } finally {
      await stopApps(apps);
    }
    // Pruned before the loss (rows gone, their aggregates' seq recorded): one aggregate in each of partitions 0 and 1.
    const db = openDatabase(h.env.dir);
    db.prepare('INSERT INTO outbox_pruned (aggregate_id, through_seq, events) VALUES (?, 7, 7), (?, 4, 4)').run(prunedIn1, prunedIn0);
    db.close();
    const kept = await Promise.all([0, 2].map((p) => Promise.all([guardsOf(partitions().clients[p]), partitions().clients[p].hgetall(keys.applyCount), partitions().clients[p].hgetall(keys.meta)])));
    await unlinkAll(partitions().clients[1], scanKeys(partitions().clients[1], '*'));
    const again = [relayApp(), consumerApp('one')];
    try {
      for (const app of again) await started(app);
      await waitFor(() => /Redis lost its state \(partition 1\)/.test(again[0].output()), { timeoutMs: 15_000, message: again[0].output() });
      await assertLedger();
      const applied1 = await guardsOf(partitions().clients[1]);
      assert.equal(applied1[prunedIn1], '7');
      assert.equal(applied1[prunedIn0], undefined, "partition 0's pruned aggregate is not written into partition 1");
      assert.equal(await partitions().clients[1].hget(keys.meta, 'unrecoverable'), '7');
      assert.equal(await partitions().clients[1].hget(keys.meta, 'partition'), `1/${PARTITIONS}`);
      const now = await Promise.all([0, 2].map((p) => Promise.all([guardsOf(partitions().clients[p]), partitions().clients[p].hgetall(keys.applyCount), partitions().clients[p].hgetall(keys.meta)])));
      assert.deepEqual(now, kept, 'partitions 0 and 2 untouched by the rebuild');
    } finally {
      await stopApps(again);
    }
  });

  it('partition 2 serves another store: the relay refuses in one line and pushes nothing more (nothing to partition 2); once partition 2 is given back, relaying resumes by itself', async () => {
    const apps = [relayApp(), consumerApp('one')];
    try {
      for (const app of apps) await started(app);
      await traffic(300);
      await assertLedger();
      const theirs = (await partitions().clients[2].hget(keys.meta, 'store'))!;
      await partitions().clients[2].hset(keys.meta, 'store', 'another-store');
      const enqueued = async () => Promise.all(partitions().clients.map((redis) => redis.get(keys.enqueued)));
      const before = await enqueued();
      await traffic(300);
      await waitFor(() => /another-store/.test(apps[0].output()), { timeoutMs: 15_000, message: apps[0].output() });
      // The batch that met the refusal may have reached partitions 0 and 1 (duplicates, see push-rows.ts); nothing more after it.
      const refusedAt = await enqueued();
      assert.equal(refusedAt[2], before[2], 'nothing pushed to partition 2');
      await sleep(1500);
      assert.deepEqual(await enqueued(), refusedAt, 'no push while partition 2 serves another store');
      assert.equal(apps[0].output().match(/"level":"error"[^\n]*serves store another-store/g)?.length, 1, apps[0].output());
      assert.doesNotMatch(apps[0].output(), /\n\s+at /, 'no stack trace');
      await partitions().clients[2].hset(keys.meta, 'store', theirs);
      await assertLedger();
    } finally {
      await stopApps(apps);
    }
  });
});

describe('drain across partitions', () => {
  it('start() with a BLMOVE wait of 0 ("for ever") on partitions waits a quarter of the lease instead', async () => {
    const events = defineEvents({ Added: { aggregate: 'cart', payload: z.object({ n: z.number() }) } });
    const handlers = defineRedisHandlers(events, { Added: () => [] });
    const consumer = await createConsumer({ redis: partitions(), handlers, consumerId: 'capped', partitionLeaseMs: 1000 });
    const target = { redisUrl: h.env.redisUrl };
    const opened: Redis[] = [];
    const timeouts = new Set<string>();
    const running = consumer.start({
      log: createLogger('test', () => {}),
      connectBlocking: async (partition) => {
        const redis = await connectTarget(target, { partition, reconnect: false });
        opened.push(redis);
        return redis;
      },
      statsIntervalMs: 0,
      blockTimeoutSeconds: 0,
    });
    try {
      await monitorWhile(h.env.redisUrl, (args) => {
        if (args[0] === 'blmove') timeouts.add(args[5]);
      }, () => waitFor(() => timeouts.size > 0, { message: 'no BLMOVE seen' }));
      assert.deepEqual([...timeouts], ['0.25']);
    } finally {
      await running.stop();
      await consumer.close();
      for (const redis of opened) redis.disconnect();
    }
  });

  it('drain() ends only once the event waiting for its retry in one partition is applied; every partition drained, each event once', async () => {
    const storeId = 'store-drain';
    const events = defineEvents({ Added: { aggregate: 'cart', payload: z.object({ n: z.number() }) } });
    const failed = new Set<string>();
    const handlers = defineRedisHandlers(events, {
      Added: (event) => {
        // The first attempt at cart:0's second event fails: it waits for its retry (backoff) in its partition.
        if (event.aggregateId === '0' && event.seq === 2 && !failed.has(event.eventId)) {
          failed.add(event.eventId);
          throw new Error('injected: first attempt fails');
        }
        return [effect.hincrby(`total:cart:${event.aggregateId}`, 'n', event.payload.n)];
      },
    });
    for (let p = 0; p < PARTITIONS; p += 1) await claimStore(partitions().clients[p], storeId, undefined, partitionLayout(p, PARTITIONS));
    const carts = Array.from({ length: 9 }, (_, i) => `cart:${i}`);
    assert.equal(new Set(carts.map((c) => partitionOf(c, PARTITIONS))).size, PARTITIONS);
    for (const cart of carts) {
      const p = partitionOf(cart, PARTITIONS);
      const messages = [1, 2, 3].map((seq) => JSON.stringify({ event_id: `${cart}-${seq}`, aggregate_id: cart, seq, event_type: 'Added', payload: { n: seq }, store_id: storeId }));
      assert.equal((await pushEvents(partitions().clients[p], storeId, messages, partitionLayout(p, PARTITIONS))).status, 'ok');
    }
    const consumer = await createConsumer({ redis: partitions(), handlers, consumerId: 'drainer' });
    const stats = await consumer.drain();
    await consumer.close();
    assert.equal(failed.size, 1, 'the injected failure happened');
    assert.equal(stats.applied, 27);
    assert.ok(stats.retried >= 1, JSON.stringify(stats));
    for (const cart of carts) {
      const redis = partitions().clients[partitionOf(cart, PARTITIONS)];
      assert.equal(await redis.hget(`total:${cart}`, 'n'), '6', cart);
      assert.equal(await redis.llen(keys.processing('drainer')), 0);
      assert.equal(await redis.llen(keys.events), 0);
    }
  });
});

describe('partition leases on a Redis Cluster under faults', () => {
  const P = 4;
  let cluster: RedisCluster;
  let cparts: Partitions;
  /** The master (index into cluster.nodes) serving each partition. */
  let masters: number[];
  before(async () => {
    cluster = await startRedisCluster();
    const target = { redisUrl: '', redisCluster: cluster.nodes.join(','), partitions: P };
    cparts = await connectTargetPartitions(target, (options) => connectTarget(target, { ...options, reconnect: true }));
    const direct = new Redis(`redis://${cluster.nodes[0]}`);
    const ranges = (await direct.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
    direct.disconnect();
    masters = Array.from({ length: P }, (_, p) => {
      const slot = slotOf(`{p${p}}:x`);
      const [, , [host, port]] = ranges.find(([from, to]) => slot >= from && slot <= to)!;
      return cluster.nodes.indexOf(`${host}:${port}`);
    });
  });
  after(async () => {
    await closePartitions(cparts);
    await cluster.stop();
  });
  beforeEach(async () => {
    await pgdb.reset();
    await pgdb.scalar('DROP TABLE IF EXISTS orders');
    await createPgLabSchema(pgdb.pool(1));
  });
  const cenv = (extra: Record<string, string>) => ({ OUTBOX_DATABASE_URL: pgdb.url, OUTBOX_REDIS_CLUSTER: cluster.nodes.join(','), OUTBOX_PARTITIONS: String(P), ...extra });
  const pgRows = async () => (await pgdb.pool(1).query<{ event_id: string; aggregate_id: string; seq: number }>('SELECT event_id, aggregate_id, seq FROM outbox')).rows;
  /** Orders placed and changed on PostgreSQL for `ms`. */
  async function pgTraffic(ms: number): Promise<void> {
    const service = await createPgOrderService(pgdb.pool(2));
    const ids: number[] = [];
    for (let i = 0; i < 12; i += 1) ids.push((await service.placeOrder({ sku: `SKU-${i % 3}`, qty: 1 })).order.id);
    const until = Date.now() + ms;
    for (let round = 0; Date.now() < until; round += 1) for (const id of ids) await service.changeQty(id, 2 + round);
  }

  it("partition 0's master down (the members), a consumer SIGKILLed: its partitions on the masters still up are taken by the other within seconds; every event once, in order, once the master is back", async () => {
    // a and b (sorted) share round-robin: a holds 0 and 2, b 1 and 3. Partition 2 must be on another master than 0.
    assert.notEqual(masters[2], masters[0], `partitions on masters ${masters.join(', ')}`);
    const relay = startApp(h.env, 'dist/apps/relay/main.js', [], cenv({ OUTBOX_RELAY_BATCH_SIZE: '50', OUTBOX_RELAY_POLL: '5ms' }));
    const a = consumerApp('a', cenv({}));
    const b = consumerApp('b', cenv({}));
    try {
      for (const app of [relay, a, b]) await started(app);
      await waitFor(async () => (await holders(cparts)).map((o) => o?.split('#')[0]).join() === 'a,b,a,b', { timeoutMs: 15_000, message: 'not shared a,b,a,b' });
      await pgTraffic(300);
      await cluster.kill(masters[0]);
      a.child.kill('SIGKILL');
      await a.exited;
      const t0 = Date.now();
      await waitFor(async () => (await cparts.clients[2].get(keys.partitionLease).catch(() => null))?.startsWith('b#') ?? false, {
        timeoutMs: 15_000,
        message: `b did not take partition 2 while partition 0's master was down: ${b.output().slice(-3000)}`,
      });
      const takeoverMs = Date.now() - t0;
      // Written while the master is down: batches with rows for its partitions are not marked, pushed again once it is back.
      await pgTraffic(300);
      await cluster.restart(masters[0]);
      await pgTraffic(300);
      await assertLedger(cparts, pgRows);
      assert.ok(takeoverMs < 10_000, `taken over in ${takeoverMs} ms`);
    } finally {
      await stopApp(a, 'SIGKILL');
      const codes = [await stopApp(relay), await stopApp(b)].map((exit) => exit.code);
      assert.deepEqual(codes, [0, 0], relay.output() + b.output());
    }
  });
});
