// The command line across partitions: one scenario, run on one Redis and on a Redis Cluster.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { runCli, type CliEnv } from './cli.js';
import { orders } from './orders.js';
import { readDb, tempDir } from './stores.js';
import { closePartitions, connectTarget, connectTargetPartitions, type RedisTarget } from '../../shared/outbox/redis/connect-partitions.js';
import { partitionOf, type Partitions } from '../../shared/outbox/redis/partitions.js';
import { keys } from '../../shared/outbox/redis/keys.js';
import { scanKeys, unlinkAll } from '../../shared/outbox/redis/scan-keys.js';
import { createConsumer } from '../../shared/outbox/consumer/create-consumer.js';
import { handlers } from '../../shared/lab/orders/order-handlers.js';
import { createLogger } from '../../shared/outbox/logger.js';
import { waitFor } from '../../shared/tooling/local/wait-for.js';
import { freePort } from '../../shared/tooling/local/redis-server.js';
import { startApp, stopApps } from './apps.js';
import type { TestDatabase } from './postgres.js';

/** Partitions of every run. */
export const P = 3;


export interface Setup {
  /** What the CLI gets besides its data dir. */
  target: RedisTarget;
  /** Every key of the Redis (or of every master), for "nothing left". */
  allKeys(): Promise<string[]>;
  close(): Promise<void>;
}

/** A row of app.db's outbox. */
interface Row {
  id: number;
  event_id: string;
  aggregate_id: string;
  seq: number;
}

function rows(dir: string): Row[] {
  const db = readDb(dir);
  try {
    return db.prepare('SELECT id, event_id, aggregate_id, seq FROM outbox ORDER BY id').all() as Row[];
  } finally {
    db.close();
  }
}

/** The first order id (from 1) whose aggregate is in a partition other than 0. */
function orderOutsidePartition0(from = 1): number {
  for (let id = from; ; id += 1) if (partitionOf(`order:${id}`, P) !== 0) return id;
}

/**
 * The same scenario on one Redis with 3 partitions (partitions-cli.test.ts), and on a 3-master Redis
 * Cluster with 3 partitions (partitions-cluster-cli.test.ts: a file of its own, so the two run side
 * by side). `pgDb`: the file's own PostgreSQL database, for the PostgreSQL store across partitions. `apps`: also under traffic from the apps (the relay app on app.db runs on one Redis).
 */
export function partitionSuite(name: string, start: () => Promise<Setup>, pgDb: TestDatabase, { apps = false } = {}): void {
  describe(name, () => {
    let setup: Setup;
    let partitions: Partitions;
    let env: CliEnv;
    const cli = (...args: string[]) => runCli(args, env);
    /** Setup steps whose output is not the subject, in this process (helpers/orders.ts). */
    const o = orders(() => env);
    const ok = async (...args: string[]) => {
      const result = await cli(...args);
      assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
      return result;
    };
    const lengths = (key: string) => Promise.all(partitions.clients.map((redis) => redis.llen(key)));
    /** The message of an event in its partition's queue, removed from it (a lost push). */
    const dropFromQueue = async (row: Row) => {
      const redis = partitions.clients[partitionOf(row.aggregate_id, P)];
      const queued = await redis.lrange(keys.events, 0, -1);
      const message = queued.find((m) => m.includes(`"${row.event_id}"`));
      assert.ok(message, `${row.event_id} is queued in partition ${partitionOf(row.aggregate_id, P)}`);
      assert.equal(await redis.lrem(keys.events, 1, message), 1);
    };

    before(async () => {
      setup = await start();
      partitions = await connectTargetPartitions(setup.target, (options) => connectTarget(setup.target, { name: 'test', ...options }));
    });
    after(async () => {
      if (partitions) await closePartitions(partitions);
      await setup?.close();
    });
    beforeEach(async () => {
      env = {
        dir: tempDir(),
        redisUrl: setup.target.redisUrl,
        env: { OUTBOX_PARTITIONS: String(P), OUTBOX_REDIS_CLUSTER: setup.target.redisCluster ?? '' },
      };
      // A clean state in every partition, as `init --force` makes it.
      await o.init();
    });

    it('orders with several events each go to their aggregates\' partitions; consume, verify (inventory summed over partitions), report and status add them up', async () => {
      o.place(12, { sku: 'SKU-A', qty: 2 });
      for (const id of [1, 2, 3, 4, 5, 6]) o.changeQty(id, id + 2);
      for (const id of [2, 7]) o.cancel(id);
      const all = rows(env.dir);
      assert.equal(all.length, 20);
      const expected = [0, 1, 2].map((p) => all.filter((r) => partitionOf(r.aggregate_id, P) === p).length);
      assert.ok(expected.filter((n) => n > 0).length >= 2, `the orders spread over partitions: ${expected}`);

      const relay = await ok('relay');
      assert.match(relay.stdout, new RegExp(`LLEN outbox.events = 20 \\(${expected.join(', ')} by partition\\)`));
      assert.deepEqual(await lengths(keys.events), expected);

      const status = await ok('status');
      assert.match(status.stdout, /queue +outbox.events 20, enqueued in total 20/);
      for (const p of [0, 1, 2]) {
        assert.match(status.stdout, new RegExp(`^(partitions)? +${p} +queued ${expected[p]}, in flight 0, applied 0, parked 0, dead-lettered 0; no consumer holds its lease$`, 'm'));
      }

      const consume = await ok('consume');
      assert.match(consume.stdout, /applied 20, duplicates skipped 0, parked 0, dead-lettered 0/);
      assert.match(consume.stdout, new RegExp(`HLEN processed = 20 \\(${expected.join(', ')} by partition\\)`));

      const verify = await ok('verify', '--settle', '0s');
      assert.match(verify.stdout, /processed_unique = outbox rows +20 +20 +ok/);
      assert.match(verify.stdout, /aggregates whose applied seq != last seq +0 +0 +ok/);
      // The inventory is one hash per partition: equal to the live orders only when summed.
      assert.match(verify.stdout, /SKUs whose reserved qty != live orders +0 +0 +ok/);
      assert.match(verify.stdout, /VERIFY OK/);
      const reserved = await Promise.all(partitions.clients.map((redis) => redis.hget('inventory:reserved', 'SKU-A')));
      assert.ok(reserved.filter((r) => r !== null).length >= 2, `the inventory is spread over partitions: ${reserved}`);

      const report = await ok('report');
      assert.match(report.stdout, /orders=12\noutbox=20\nenqueued=20\nprocessed_unique=20/);
      const after = await ok('status');
      for (const p of [0, 1, 2]) assert.match(after.stdout, new RegExp(`^(partitions)? +${p} +queued 0, in flight 0, applied ${expected[p]},`, 'm'));
    });

    it('verify names an event lost in a partition other than 0 (and that partition); --repair republishes it there', async () => {
      const id = orderOutsidePartition0();
      const partition = partitionOf(`order:${id}`, P);
      o.place(id + 1);
      o.changeQty(id, 9);
      await o.relay();
      const lost = rows(env.dir).find((r) => r.aggregate_id === `order:${id}` && r.seq === 2)!;
      await dropFromQueue(lost);
      await o.consume();

      const broken = await cli('verify', '--settle', '0s');
      assert.equal(broken.code, 1, broken.stdout + broken.stderr);
      assert.match(broken.stdout, /events lost \(never applied, not in Redis\) +0 +1 +FAIL/);
      assert.ok(broken.stdout.includes(`e.g. ${lost.event_id} (partition ${partition})`), broken.stdout);
      assert.ok(broken.stdout.includes(`order:${id} (partition ${partition})`), 'its applied seq is behind, named with its partition');

      const repair = await ok('verify', '--settle', '0s', '--repair', '--yes');
      assert.match(repair.stdout, /repair: republished 1 lost event\(s\)/);
      const queued = await lengths(keys.events);
      assert.deepEqual(queued, [0, 1, 2].map((p) => (p === partition ? 1 : 0)));
      await o.consume();
      await o.verify('0s');
    });

    it('a partition that lost its state: verify and status name it, --repair rebuilds that partition only', async () => {
      o.place(9, { sku: 'SKU-A', qty: 2 });
      o.changeQty(1, 4);
      await o.relay();
      await o.consume();
      const lostPartition = 1;
      const inLost = rows(env.dir).filter((r) => partitionOf(r.aggregate_id, P) === lostPartition);
      assert.ok(inLost.length > 0);
      const redis = partitions.clients[lostPartition];
      assert.ok((await unlinkAll(redis, scanKeys(redis, '*'))) > 0);

      const broken = await cli('verify', '--settle', '0s');
      assert.equal(broken.code, 1, broken.stdout + broken.stderr);
      assert.match(broken.stdout, /Redis serves this store +yes +no: Redis lost its state +FAIL\n  e\.g\. partition 1, the relay rebuilds it/);
      assert.match(broken.stdout, new RegExp(`events lost \\(never applied, not in Redis\\) +0 +${inLost.length} +FAIL`));
      const status = await ok('status');
      assert.match(status.stdout, /^store +\S+: WARN Redis lost its state/m);
      assert.match(status.stdout, /^ +1 +queued 0, in flight 0, applied 0, parked 0, dead-lettered 0, WARN lost its state;/m);

      // The plan names what the rebuild resets: the rows of that partition's aggregates only.
      const dry = await cli('verify', '--settle', '0s', '--repair', '--dry-run');
      assert.match(dry.stdout, new RegExp(`verify --repair would rebuild Redis, which lost its state \\(partition 1\\), from SQLite: set ${inLost.length} PUBLISHED row\\(s\\)`));
      assert.match(dry.stdout, /dry run: nothing changed/);
      const repair = await ok('verify', '--settle', '0s', '--repair', '--yes');
      assert.match(repair.stdout, new RegExp(`repair: Redis lost its state \\(partition 1\\): rebuilding it from SQLite, ${inLost.length} published event\\(s\\) set back to PENDING`));
      assert.deepEqual(await lengths(keys.events), [0, 1, 2].map((p) => (p === lostPartition ? inLost.length : 0)));
      await o.consume();
      await o.verify('0s');
    });

    it('on the PostgreSQL store: relay, consume and verify across partitions; a partition that lost its state is planned and rebuilt alone', async () => {
      await pgDb.reset();
      await pgDb.scalar('DROP TABLE IF EXISTS orders');
      const pgEnv = (): CliEnv => ({ ...env, env: { ...env.env, OUTBOX_DATABASE_URL: pgDb.url } });
      const pg = (...args: string[]) => runCli(args, pgEnv());
      const pgOk = async (...args: string[]) => {
        const result = await pg(...args);
        assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
        return result;
      };
      const po = orders(pgEnv);
      await po.init();
      await po.pg.place(9, { sku: 'SKU-A', qty: 2 });
      await po.pg.changeQty(1, 4);
      await po.pg.cancel(2);
      const events = (await pgDb.pool(1).query<{ aggregate_id: string }>('SELECT aggregate_id FROM outbox')).rows;
      const expected = [0, 1, 2].map((p) => events.filter((e) => partitionOf(e.aggregate_id, P) === p).length);
      assert.match((await pgOk('relay')).stdout, new RegExp(`LLEN outbox.events = 11 \\(${expected.join(', ')} by partition\\)`));
      await po.consume();
      const verify = await pgOk('verify', '--settle', '0s');
      assert.match(verify.stdout, /SKUs whose reserved qty != live orders +0 +0 +ok/);
      assert.match(verify.stdout, /VERIFY OK/);

      const redis = partitions.clients[1];
      await unlinkAll(redis, scanKeys(redis, '*'));
      const dry = await pg('verify', '--settle', '0s', '--repair', '--dry-run');
      assert.match(dry.stdout, new RegExp(`would rebuild Redis, which lost its state \\(partition 1\\), from PostgreSQL: set ${expected[1]} PUBLISHED row\\(s\\)`));
      const repair = await pgOk('verify', '--settle', '0s', '--repair', '--yes');
      assert.match(repair.stdout, new RegExp(`repair: Redis lost its state \\(partition 1\\): rebuilding it from PostgreSQL, ${expected[1]} published event\\(s\\) set back to PENDING`));
      assert.deepEqual(await lengths(keys.events), [0, expected[1], 0]);
      await po.consume();
      await po.verify('0s');
      assert.match((await pgOk('status')).stdout, /^ +1 +queued 0, in flight 0, applied \d+, parked 0, dead-lettered 0; no consumer holds its lease$/m);
    });

    it('replay: a replayed event goes back to its aggregate\'s partition, and the consumer skips it there', async () => {
      const id = orderOutsidePartition0();
      const partition = partitionOf(`order:${id}`, P);
      o.place(id + 2);
      await o.relay();
      await o.consume();
      const row = rows(env.dir).find((r) => r.aggregate_id === `order:${id}`)!;
      const replay = await ok('replay', '--from', String(row.id), '--to', String(row.id), '--yes');
      assert.match(replay.stdout, /^1 row\(s\) set back to PENDING/m);
      await o.relay();
      assert.deepEqual(await lengths(keys.events), [0, 1, 2].map((p) => (p === partition ? 1 : 0)));
      assert.match((await ok('consume')).stdout, /applied 0, duplicates skipped 1/);
      await o.verify('0s');
    });

    it('relay-crash, then relay: dup-check finds the events pushed twice in their partitions, order-check finds them in order, consume skips them', async () => {
      o.place(6);
      o.changeQty(1, 3);
      o.changeQty(4, 3);
      const crash = await cli('relay-crash');
      assert.equal(crash.signal, 'SIGKILL', crash.stderr);
      assert.match((await ok('relay')).stdout, /relayed 8 events/);
      const expected = [0, 1, 2].map((p) => 2 * rows(env.dir).filter((r) => partitionOf(r.aggregate_id, P) === p).length);
      assert.deepEqual(await lengths(keys.events), expected);
      const dups = await cli('dup-check');
      assert.equal(dups.code, 0, dups.stderr);
      assert.equal(dups.stdout.match(/^DUPLICATE event_id=\S+ count=2$/gm)?.length, 8);
      assert.match(dups.stdout, /\(16 queued events read;/);
      const order = await ok('order-check');
      assert.match(order.stdout, /^ORDER OK$/m);
      assert.match(order.stdout, /\(16 events of 6 aggregates checked;/);
      assert.match((await ok('consume')).stdout, /applied 8, duplicates skipped 8/);
      await o.verify('0s');
    });

    it('dead-letter list, retry and drop in a partition other than 0', async () => {
      const partition = 2;
      await partitions.clients[partition].rpush(keys.events, 'not an event');
      await o.consume();
      const list = await ok('dead-letter', 'list');
      assert.match(list.stdout, new RegExp(`^${partition}:0  partition ${partition}  \\S+  .*not an event$`, 'm'));
      const json = JSON.parse((await ok('dead-letter', 'list', '--json')).stdout) as { id: string; partition: number }[];
      assert.deepEqual(json.map((h) => [h.id, h.partition]), [[`${partition}:0`, partition]]);

      const retried = await ok('dead-letter', 'retry', '--id', `${partition}:0`);
      assert.match(retried.stdout, /1 dead-letter entr\(ies\) put back on outbox.events/);
      assert.deepEqual(await lengths(keys.events), [0, 0, 1]);
      assert.deepEqual(await lengths(keys.deadLetter), [0, 0, 0]);
      await o.consume();
      assert.deepEqual(await lengths(keys.deadLetter), [0, 0, 1]);

      const unknown = await cli('dead-letter', 'drop', '--id', '0:0', '--yes');
      assert.equal(unknown.code, 2, unknown.stderr);
      assert.match(unknown.stderr, /^outbox: no dead-letter entry 0:0 \(see "outbox dead-letter list"\)\n$/);
      const dropped = await ok('dead-letter', 'drop', '--id', `${partition}:0`, '--yes');
      assert.match(dropped.stdout, /1 dead-letter entr\(ies\) dropped/);
      assert.deepEqual(await lengths(keys.deadLetter), [0, 0, 0]);
    });

    it('parked list and retry in a partition other than 0; the repaired gap releases it there', async () => {
      const id = orderOutsidePartition0();
      const partition = partitionOf(`order:${id}`, P);
      o.place(id);
      o.changeQty(id, 4);
      o.changeQty(id, 5);
      await o.relay();
      await dropFromQueue(rows(env.dir).find((r) => r.aggregate_id === `order:${id}` && r.seq === 2)!);
      assert.match((await ok('consume')).stdout, /parked 1/);

      const list = await ok('parked', 'list');
      assert.match(list.stdout, new RegExp(`^order:${id}:3  partition ${partition}  `, 'm'));
      const retried = await ok('parked', 'retry', '--id', `order:${id}:3`);
      assert.match(retried.stdout, /1 parked entr\(ies\) put back on outbox.events/);
      assert.deepEqual(await lengths(keys.events), [0, 1, 2].map((p) => (p === partition ? 1 : 0)));
      assert.equal(await partitions.clients[partition].hlen(keys.parked), 0);
      // Still behind the gap: parked again.
      assert.match((await ok('consume')).stdout, /parked 1/);
      assert.equal(await partitions.clients[partition].hlen(keys.parked), 1);

      const repair = await ok('verify', '--settle', '0s', '--repair', '--yes');
      assert.match(repair.stdout, /events lost \(never applied, not in Redis\) +0 +1 +FAIL/);
      assert.match(repair.stdout, /repair: republished 1 lost event\(s\)/);
      await o.consume();
      assert.equal(await partitions.clients[partition].hlen(keys.parked), 0);
      await o.verify('0s');
    });

    it('status names the consumer holding each partition\'s lease', async () => {
      const log = createLogger('test', () => {});
      const consumer = await createConsumer({ redis: partitions, handlers, consumerId: 'leaser', partitionLeaseMs: 2000 });
      const running = consumer.start({
        log,
        statsIntervalMs: 0,
        connectBlocking: (partition) => connectTarget(setup.target, { name: 'test-take', partition }),
      });
      try {
        await waitFor(async () => (await Promise.all(partitions.clients.map((redis) => redis.get(keys.partitionLease)))).every((owner) => owner?.startsWith('leaser#')), {
          message: 'the consumer took every partition',
        });
        const status = await ok('status');
        for (const p of [0, 1, 2]) assert.match(status.stdout, new RegExp(`^(partitions)? +${p} +queued 0, .*; lease held by leaser#[0-9a-f]+ \\(\\d`, 'm'));
        assert.match(status.stdout, /^heartbeats +leaser pid \d+: heartbeat/m);
      } finally {
        await running.stop();
        await consumer.close();
      }
    });

    // On one Redis only: the relay app on app.db refuses a cluster (its BullMQ job needs one Redis).
    if (apps) it('verify --settle 5s under traffic (producer, relay and consumer apps on 3 partitions): OK run after run, each partition judged at its own instant', async () => {
      const partitionsEnv = { OUTBOX_PARTITIONS: String(P) };
      const port = await freePort();
      const running = [
        startApp(env, 'dist/apps/relay/main.js', [], { ...partitionsEnv, OUTBOX_RELAY_POLL: '5ms' }),
        startApp(env, 'dist/apps/consumer/main.js', [], partitionsEnv),
        startApp(env, 'dist/apps/producer/main.js', [], { ...partitionsEnv, PORT: String(port), OUTBOX_RATE: '300' }),
      ];
      try {
        await waitFor(async () => (await Promise.all(partitions.clients.map((redis) => redis.hlen(keys.processed)))).every((n) => n >= 50), {
          timeoutMs: 30_000,
          message: 'no traffic got through every partition',
        });
        for (let run = 0; run < 3; run += 1) {
          const result = await cli('verify', '--settle', '5s');
          assert.equal(result.code, 0, result.stdout + result.stderr);
          assert.match(result.stdout, /SKUs whose reserved qty != live orders +0 +0 +ok/);
          assert.match(result.stdout, /VERIFY OK/);
        }
      } finally {
        // The producer first: what it wrote last is relayed and applied below.
        await stopApps([...running].reverse());
      }
      await o.relay();
      await o.consume();
      await o.verify('0s');
    });

    it('init --force deletes the keys of every partition (the consumers\' members in partition 0 included)', async () => {
      o.place(9);
      await o.relay();
      await o.consume();
      await partitions.clients[0].zadd(keys.consumerMembers, Date.now() + 60_000, 'someone#1');
      const before = await setup.allKeys();
      for (const p of [0, 1, 2]) assert.ok(before.some((key) => key.startsWith(`{p${p}}:`)), `partition ${p} has keys`);
      const dry = await ok('init', '--force', '--dry-run');
      assert.match(dry.stdout, new RegExp(`delete ${before.length} Redis key\\(s\\) of this deployment`));
      assert.match(dry.stdout, /key \{p0\}:/);
      const init = await ok('init', '--force', '--yes');
      assert.match(init.stdout, new RegExp(`cleared ${before.length} Redis keys of this project`));
      assert.deepEqual(await setup.allKeys(), []);
    });
  });
}
