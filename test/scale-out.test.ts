import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { createPgLabSchema, createPgOrderService } from '../shared/lab/orders/pg-order-service.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../shared/outbox/redis/connect-partitions.js';
import { partitionOf, type Partitions } from '../shared/outbox/redis/partitions.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { ledgerHolds, partitionLedger } from '../shared/tooling/chaos/partition-ledger.js';
import { startApp, stopApp, stopApps, type App } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { usePostgres } from './helpers/postgres.js';
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.js';

// The scale-out path end to end: the PostgreSQL store, several relay apps, a 3-master Redis Cluster
// with the events partitioned by aggregate, and consumer apps that share the partitions by lease.
const db = usePostgres();
const h = useHarness({ init: false });
const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';
const PARTITIONS = 4;

let cluster: RedisCluster;
let parts: Partitions;

before(async () => {
  cluster = await startRedisCluster();
  parts = await connectTargetPartitions({ redisUrl: '', redisCluster: cluster.nodes.join(','), partitions: PARTITIONS }, (options) =>
    connectTarget({ redisUrl: '', redisCluster: cluster.nodes.join(',') }, { ...options, reconnect: true }),
  );
});
after(async () => {
  await closePartitions(parts);
  await cluster.stop();
});
beforeEach(async () => {
  await db.reset();
  await db.scalar('DROP TABLE IF EXISTS orders');
  await createPgLabSchema(db.pool(1));
  // Every partition's keys, and the members of partition 0: a fresh Redis for each test.
  await Promise.all(parts.clients.map((redis) => flushPartition(redis)));
});

async function flushPartition(redis: Redis): Promise<void> {
  const { scanKeys, unlinkAll } = await import('../shared/outbox/redis/scan-keys.js');
  await unlinkAll(redis, scanKeys(redis, '*'));
}

const env = (extra: Record<string, string> = {}) => ({
  OUTBOX_DATABASE_URL: db.url,
  OUTBOX_REDIS_CLUSTER: cluster.nodes.join(','),
  OUTBOX_PARTITIONS: String(PARTITIONS),
  ...extra,
});

const relayApp = () => startApp(h.env, RELAY, [], env({ OUTBOX_RELAY_BATCH_SIZE: '50', OUTBOX_RELAY_POLL: '5ms' }));
const consumerApp = (id: string) => startApp(h.env, CONSUMER, [], env({ OUTBOX_CONSUMER_ID: id, OUTBOX_PARTITION_LEASE: '1s', OUTBOX_HANDLER_THREADS: '1' }));

/**
 * Orders written on `writers` connections at once: each places `ordersEach` orders, then changes
 * their qty round-robin until `until` is aborted (at least `changesEach` times): aggregates with
 * many events each, interleaved across aggregates.
 */
async function traffic(writers: number, ordersEach: number, changesEach: number, until?: AbortSignal): Promise<void> {
  const service = await createPgOrderService(db.pool(writers));
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      const ids: number[] = [];
      for (let i = 0; i < ordersEach; i += 1) ids.push((await service.placeOrder({ sku: `SKU-${(w + i) % 3}`, qty: 1 })).order.id);
      for (let i = 0; i < changesEach || (until !== undefined && !until.aborted); i += 1) {
        const id = ids[i % ids.length];
        const order = (await service.getOrder(id))!;
        await service.changeQty(id, order.qty + 1);
      }
    }),
  );
}

/** Applied events summed over the partitions. */
async function appliedCount(): Promise<number> {
  return (await Promise.all(parts.clients.map((redis) => redis.hlen(keys.processed)))).reduce((a, b) => a + b, 0);
}

/** Every outbox row applied once in its partition, in seq order per aggregate, nothing dead, parked or queued (see partition-ledger.ts). */
async function assertLedger(): Promise<{ events: number; aggregates: number }> {
  const read = async () => partitionLedger((await db.pool(1).query<{ event_id: string; aggregate_id: string; seq: string }>('SELECT event_id, aggregate_id, seq FROM outbox')).rows, parts);
  // Duplicates may still be queued a moment after the last event was applied: awaited, then judged.
  await waitFor(async () => ledgerHolds(await read()), { timeoutMs: 30_000 }).catch(() => {});
  const ledger = await read();
  const { events, aggregates, ...faults } = ledger;
  assert.deepEqual(faults, { lost: [], appliedTwice: [], outOfOrder: [], extra: 0, deadLettered: 0, parked: 0, queued: 0 });
  assert.ok(ledgerHolds(ledger));
  return { events, aggregates };
}

/** Who holds each partition's lease now (the consumer id, without the run's token), '' for none. */
async function leaseHolders(): Promise<string[]> {
  return Promise.all(parts.clients.map(async (redis) => (await redis.get(keys.partitionLease))?.split('#')[0] ?? ''));
}

const started = (app: App, what: 'relay' | 'consumer') => waitFor(() => new RegExp(`"msg":"${what} started"`).test(app.output()), { timeoutMs: 20_000, message: app.output() });

describe('scale-out: PostgreSQL, 4 relays, a Redis Cluster with 4 partitions, 3 consumers', () => {
  it('under traffic from 4 connections every event is applied once, in seq order per aggregate, by consumers that each hold a share of the partitions', async () => {
    const relays = [1, 2, 3, 4].map(() => relayApp());
    const consumers = ['c1', 'c2', 'c3'].map((id) => consumerApp(id));
    const apps = [...relays, ...consumers];
    try {
      for (const app of relays) await started(app, 'relay');
      for (const app of consumers) await started(app, 'consumer');
      // Three consumers, four partitions: each holds one or two, every partition is held.
      await waitFor(async () => {
        const holders = await leaseHolders();
        return holders.every((holder) => holder !== '') && new Set(holders).size === 3;
      }, { timeoutMs: 15_000, message: 'the partitions were not shared among the 3 consumers' });
      await traffic(4, 6, 120);
      const total = Number(await db.scalar('SELECT COUNT(*) FROM outbox'));
      await waitFor(async () => (await appliedCount()) >= total, { timeoutMs: 60_000, message: 'not every event applied' });
      const { events, aggregates } = await assertLedger();
      assert.ok(events / aggregates >= 10, `aggregates get many events (${events} over ${aggregates})`);
      assert.ok(new Set((await db.pool(1).query<{ aggregate_id: string }>('SELECT DISTINCT aggregate_id FROM outbox')).rows.map((r) => partitionOf(r.aggregate_id, PARTITIONS))).size === PARTITIONS, 'the aggregates spread over every partition');
      const queued = await Promise.all(parts.clients.map((redis) => redis.llen(keys.events)));
      assert.deepEqual(queued, [0, 0, 0, 0]);
      const relayed = await Promise.all(relays.map(async (app) => app.output()));
      assert.ok(relayed.every((output) => !/"level":"(error|fatal)"/.test(output)), relayed.join('\n'));
    } finally {
      await stopApps(apps);
    }
  });

  it('a consumer killed under traffic: the others take its partitions within a few seconds, a consumer that joins gets a share, and nothing is lost or applied twice', async () => {
    const relays = [1, 2].map(() => relayApp());
    const a = consumerApp('a');
    const b = consumerApp('b');
    let c: App | undefined;
    try {
      for (const app of relays) await started(app, 'relay');
      for (const app of [a, b]) await started(app, 'consumer');
      await waitFor(async () => (await leaseHolders()).filter((x) => x === 'a').length === 2 && (await leaseHolders()).filter((x) => x === 'b').length === 2, {
        timeoutMs: 15_000,
        message: 'a and b did not hold two partitions each',
      });
      const stop = new AbortController();
      const writing = traffic(3, 5, 40, stop.signal);
      await waitFor(async () => (await appliedCount()) > 100, { timeoutMs: 20_000 });
      a.child.kill('SIGKILL');
      const killedAt = Date.now();
      await waitFor(async () => (await leaseHolders()).every((x) => x === 'b'), { timeoutMs: 15_000, message: 'b did not take over the partitions of a' });
      const takeoverMs = Date.now() - killedAt;
      assert.ok(takeoverMs < 5000, `taken over in ${takeoverMs} ms`);
      c = consumerApp('c');
      await started(c, 'consumer');
      await waitFor(async () => (await leaseHolders()).filter((x) => x === 'c').length === 2, { timeoutMs: 15_000, message: 'c got no share of the partitions' });
      stop.abort();
      await writing;
      const total = Number(await db.scalar('SELECT COUNT(*) FROM outbox'));
      await waitFor(async () => (await appliedCount()) >= total, { timeoutMs: 60_000, message: 'not every event applied after the takeover' });
      await assertLedger();
      assert.match(b.output(), /"msg":"partition taken".*"reclaimed"/);
    } finally {
      await stopApps([...relays, b, ...(c ? [c] : [])]);
      await stopApp(a);
    }
  });

  it('a cluster node restarted under traffic, once with its data and once having lost it: the partitions it holds are rebuilt from PostgreSQL, and every event is applied once, in order', async () => {
    const relays = [1, 2].map(() => relayApp());
    const consumers = ['x', 'y'].map((id) => consumerApp(id));
    const apps = [...relays, ...consumers];
    // The master that holds partition 0's slot: restarting it hits at least that partition.
    const node = await masterOf(parts.clients[0]);
    try {
      for (const app of relays) await started(app, 'relay');
      for (const app of consumers) await started(app, 'consumer');
      const stop = new AbortController();
      const writing = traffic(3, 5, 30, stop.signal);
      await waitFor(async () => (await appliedCount()) > 100, { timeoutMs: 20_000 });
      await cluster.restart(node);
      const afterRestart = await appliedCount();
      await waitFor(async () => (await appliedCount()) > afterRestart + 100, { timeoutMs: 30_000, message: 'nothing applied after the node came back' });
      const rebuildsBefore = Number((await db.scalar("SELECT value FROM outbox_meta WHERE key = 'redis_rebuilds'")) ?? 0);
      await cluster.restart(node, { wipe: true });
      await waitFor(async () => Number((await db.scalar("SELECT value FROM outbox_meta WHERE key = 'redis_rebuilds'")) ?? 0) > rebuildsBefore, {
        timeoutMs: 30_000,
        message: 'no relay rebuilt the partitions of the node that lost its data',
      });
      stop.abort();
      await writing;
      const total = Number(await db.scalar('SELECT COUNT(*) FROM outbox'));
      await waitFor(async () => (await appliedCount()) >= total && (await Promise.all(parts.clients.map((r) => r.llen(keys.events)))).every((n) => n === 0), {
        timeoutMs: 60_000,
        message: 'not every event applied after the node lost its data',
      });
      await assertLedger();
      assert.match(relays.map((app) => app.output()).join(''), /Redis lost its state \(partition/);
    } finally {
      await stopApps(apps);
    }
  });
});

/** Which of the cluster's masters (index into `cluster.nodes`) holds the slot of a partition's keys. */
async function masterOf(partition: Redis): Promise<number> {
  const { slotOf } = await import('../shared/outbox/redis/cluster-client.js');
  const slot = slotOf(`${String(partition.options.keyPrefix)}${keys.events}`);
  const ranges = (await partition.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
  const [, , [host, port]] = ranges.find(([from, to]) => slot >= from && slot <= to)!;
  return cluster.nodes.indexOf(`${host}:${port}`);
}
