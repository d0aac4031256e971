/**
 * Redis Cluster: connectRedisCluster's checks and one-line errors, partition connections whose
 * keys (the scripts' own, the markers and the effects they derive) all land in one slot, SCAN and
 * UNLINK across masters, a blocking BLMOVE, and a master restarted under a connection. A private
 * 3-master cluster (test/helpers/redis-cluster.ts).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { clusterNodesProblem, parseClusterNodes } from '../shared/outbox/config.js';
import { RedisSettingsError } from '../shared/outbox/errors/redis-settings-error.js';
import { StoreUnavailableError } from '../shared/outbox/errors/store-unavailable-error.js';
import { takingConnection } from '../shared/outbox/consumer/drive-rounds.js';
import { closeRedis } from '../shared/outbox/redis/connect.js';
import { connectClusterUntilReady, connectRedisCluster } from '../shared/outbox/redis/connect-cluster.js';
import { createLogger } from '../shared/outbox/logger.js';
import { mastersOf, slotOf } from '../shared/outbox/redis/cluster-client.js';
import { describeRedis } from '../shared/outbox/redis/describe.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { processingLists } from '../shared/outbox/redis/processing-lists.js';
import { keyPrefixOfConnection, scanKeys, unlinkAll } from '../shared/outbox/redis/scan-keys.js';
import { applyEvents, moveToProcessing, pushEvents, type EventToApply } from '../shared/outbox/redis/scripts.js';
import { freePort, RedisServer } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.js';
import { lastAckedMessage, reachableHere, writeWhileSyncing } from './helpers/aof.js';
import { guardKeyOf } from '../shared/outbox/redis/guards.js';

let cluster: RedisCluster;
/** Plain clients, one per master, for assertions (no prefix, no redirects). */
let direct: Redis[];
const opened: Redis[] = [];

before(async () => {
  cluster = await startRedisCluster();
  direct = cluster.nodes.map((node) => {
    const client = new Redis(`redis://${node}`);
    client.on('error', () => {});
    return client;
  });
});
after(async () => {
  await Promise.all(opened.map((redis) => closeRedis(redis)));
  direct?.forEach((client) => client.disconnect());
  await cluster?.stop();
});

async function connect(options: Parameters<typeof connectRedisCluster>[1] = {}): Promise<Redis> {
  const redis = await connectRedisCluster(cluster.nodes, options);
  opened.push(redis);
  return redis;
}

/** The master (index into cluster.nodes) that serves `slot`. */
async function masterOf(slot: number): Promise<number> {
  const ranges = (await direct[0].call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
  const range = ranges.find(([from, to]) => slot >= from && slot <= to)!;
  return cluster.nodes.indexOf(`${range[2][0]}:${range[2][1]}`);
}

/** Every key of every master, with the master's index. */
async function allKeys(): Promise<{ key: string; master: number }[]> {
  const found = await Promise.all(direct.map(async (client, master) => (await client.keys('*')).map((key) => ({ key, master }))));
  return found.flat();
}

const STORE = 'store-cluster';

function ev(id: string, aggregate: string, seq: number, effects: EventToApply['effects']): EventToApply {
  return {
    raw: JSON.stringify({ event_id: id, aggregate_id: aggregate, seq, store_id: STORE }),
    eventId: id,
    storeId: STORE,
    aggregate,
    seq,
    effects,
    result: JSON.stringify({ ok: true }),
  };
}

describe('connecting', () => {
  it('connects, checks every master, defines the scripts, names the nodes in describeRedis and closes', async () => {
    const redis = await connectRedisCluster(cluster.nodes, { requireNoEviction: true, namespace: 'ns', partition: '{p1}:' });
    assert.equal(keyPrefixOfConnection(redis), 'ns:{p1}:');
    assert.equal(describeRedis(redis), `Redis Cluster at ${cluster.nodes.join(',')} (namespace ns, partition {p1})`);
    assert.equal(mastersOf(redis).length, 3);
    assert.equal(typeof (redis as unknown as Record<string, unknown>).applyEvents, 'function');
    await redis.set('k', 'v');
    assert.equal(await direct[await masterOf(slotOf('ns:{p1}:k'))].get('ns:{p1}:k'), 'v');
    await closeRedis(redis);
    await waitFor(() => redis.status === 'end', { message: `status ${redis.status}` });
  });

  it('refuses a cluster one of whose masters may evict keys, naming that master, when requireNoEviction is set', async () => {
    await direct[2].config('SET', 'maxmemory-policy', 'allkeys-lru');
    try {
      await assert.rejects(connectRedisCluster(cluster.nodes, { requireNoEviction: true }), (error: Error) => {
        assert.ok(error instanceof RedisSettingsError, String(error));
        assert.match(error.message, new RegExp(`^Redis at redis://${cluster.nodes[2]} may evict keys \\(maxmemory-policy allkeys-lru\\)`));
        return true;
      });
      // Without the requirement (read-only commands) it connects.
      await closeRedis(await connectRedisCluster(cluster.nodes));
    } finally {
      await direct[2].config('SET', 'maxmemory-policy', 'noeviction');
    }
  });

  it('an unreachable cluster is a one-line StoreUnavailableError (exit code 5) naming the nodes, without the password', async () => {
    const ports = [await freePort(), await freePort()];
    const started = Date.now();
    await assert.rejects(
      connectRedisCluster([`redis://:s3cret-pw@127.0.0.1:${ports[0]}`, `127.0.0.1:${ports[1]}`], { connectTimeoutMs: 3000 }),
      (error: Error) => {
        assert.ok(error instanceof StoreUnavailableError, String(error));
        assert.equal(error.exitCode, 5);
        assert.equal(error.message, `cannot connect to the Redis Cluster at 127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} (ECONNREFUSED): start the cluster's nodes or point OUTBOX_REDIS_CLUSTER at running ones`);
        return true;
      },
    );
    assert.ok(Date.now() - started < 3000, 'fails fast, not at the deadline');
  });

  it('a password in the node entries applies to every node; a wrong one is a one-line error without it', async () => {
    await Promise.all(direct.map((client) => client.config('SET', 'requirepass', 'cluster-pw')));
    try {
      const withPassword = cluster.nodes.map((node, i) => (i === 0 ? `redis://:cluster-pw@${node}` : node));
      const redis = await connectRedisCluster(withPassword, { partition: '{p9}:', requireNoEviction: true });
      opened.push(redis);
      // Every master answers (the check ran on each), and a key of any slot is written.
      for (const tag of ['{a}', '{b}', '{c}']) await redis.set(`${tag}k`, '1');
      await assert.rejects(connectRedisCluster(cluster.nodes.map((node) => `redis://:wrong-pw@${node}`)), (error: Error) => {
        assert.ok(error instanceof StoreUnavailableError, String(error));
        assert.match(error.message, /^cannot connect to the Redis Cluster at [\d.:,]+ \(WRONGPASS[^)]*\): check the user and password in OUTBOX_REDIS_CLUSTER$/);
        assert.doesNotMatch(error.message, /wrong-pw/);
        return true;
      });
    } finally {
      await Promise.all(direct.map((client) => client.config('SET', 'requirepass', '')));
    }
  });

  it('a Redis that is not a cluster is a one-line StoreUnavailableError saying so', async () => {
    const single = await RedisServer.start();
    try {
      await assert.rejects(connectRedisCluster([`127.0.0.1:${single.port}`], { connectTimeoutMs: 3000 }), (error: Error) => {
        assert.ok(error instanceof StoreUnavailableError, String(error));
        assert.doesNotMatch(error.message, /\n/);
        assert.match(error.message, new RegExp(`^cannot connect to the Redis Cluster at 127.0.0.1:${single.port} \\(.*cluster support disabled.*\\): these nodes are not a cluster`));
        return true;
      });
    } finally {
      await single.destroy();
    }
  });

  it('OUTBOX_REDIS_CLUSTER: node lists parsed, bad ones a one-line problem', () => {
    assert.deepEqual(parseClusterNodes(' 127.0.0.1:7000, redis://:pw@10.0.0.2:7001 ,'), ['127.0.0.1:7000', 'redis://:pw@10.0.0.2:7001']);
    assert.equal(clusterNodesProblem('127.0.0.1:7000,[::1]:7001,redis://:pw@h:7002,redis://:pw@h:7003'), undefined);
    assert.match(clusterNodesProblem('')!, /^must list the cluster's nodes like 127\.0\.0\.1:7000,127\.0\.0\.1:7001/);
    assert.match(clusterNodesProblem('127.0.0.1')!, /^"127\.0\.0\.1" must name a host and a port/);
    assert.match(clusterNodesProblem('rediss://h:7000')!, /rediss:\/\/ is not supported/);
    assert.match(clusterNodesProblem('redis://h:7000/2')!, /only database 0/);
    const mixed = clusterNodesProblem('redis://:one@h:7000,redis://:two@h:7001')!;
    assert.match(mixed, /one user and password apply to every node/);
    assert.doesNotMatch(mixed, /one@|two@/);
    assert.doesNotMatch(clusterNodesProblem('redis://:secret@h')!, /secret/);
  });

  it('a partition that is not a hash tag and ":" is refused before connecting', async () => {
    await assert.rejects(connectRedisCluster(cluster.nodes, { partition: 'p1:' }), /partition must be a hash tag and ":" like "\{p3\}:"/);
  });
});

describe('a partition connection', () => {
  for (const partition of ['{p1}:', '{p2}:']) {
    it(`${partition}: push, take and apply (effects, dedupe markers) run in one slot`, async () => {
      const redis = await connect({ partition, requireNoEviction: true });
      await redis.hset(keys.meta, 'store', STORE);
      const events = [
        ev('e1', 'task-1', 1, [['hincrby', 'tasks:open', 'alice', '1'], ['sadd', 'tasks:all', 'task-1', '']]),
        ev('e2', 'task-2', 1, [['hset', 'task:task-2', 'title', 'write tests']]),
      ];
      assert.deepEqual(await pushEvents(redis, STORE, events.map((e) => String(e.raw))).then((r) => r.status === 'ok' && r.pushed), 2);
      const list = keys.processing('c1');
      assert.deepEqual((await moveToProcessing(redis, list, 10)).map(String), events.map((e) => e.raw));
      assert.deepEqual((await applyEvents(redis, list, events, 60)).outcomes, ['applied', 'applied']);
      // A redelivery is a duplicate: its marker (derived in the script) is found in the same slot.
      await redis.rpush(list, events[0].raw);
      assert.deepEqual((await applyEvents(redis, list, [events[0]], 60)).outcomes, ['duplicate']);
      assert.equal(await redis.hget('tasks:open', 'alice'), '1');
      assert.equal(await redis.exists(keys.seen('e1'), keys.seen('e2')), 2);

      const slot = slotOf(partition);
      const master = await masterOf(slot);
      const written = (await allKeys()).filter((k) => k.key.startsWith(partition));
      assert.deepEqual(
        written.map((k) => k.key).sort(),
        [
          'outbox.events:processing:c1', // emptied by the apply: gone
          keys.appliedLog, guardKeyOf('task-1'), guardKeyOf('task-2'), keys.window, keys.applyCount, keys.effectKeys, keys.enqueued, keys.meta, keys.stats, keys.processed, keys.processingLists,
          keys.seen('e1'), keys.seen('e2'), 'tasks:open', 'tasks:all', 'task:task-2',
        ].filter((k) => k !== 'outbox.events:processing:c1').map((k) => partition + k).sort(),
      );
      assert.ok(written.every((k) => k.master === master && slotOf(k.key) === slot));
      assert.deepEqual(await redis.smembers(keys.effectKeys).then((s) => s.sort()), ['task:task-2', 'tasks:all', 'tasks:open'].map((k) => partition + k));
      // The take recorded its list under the name the connection uses (its prefix added again by each command).
      assert.deepEqual(await redis.smembers(keys.processingLists), [list]);
    });
  }

  it('the partitions are apart: each has its own queue and markers', async () => {
    const [p1, p2] = [await connect({ partition: '{p1}:' }), await connect({ partition: '{p2}:' })];
    assert.notEqual(slotOf('{p1}:x'), slotOf('{p2}:x'));
    await p1.rpush('outbox.events', 'only-p1');
    assert.equal(await p1.llen('outbox.events'), 1);
    assert.equal(await p2.llen('outbox.events'), 0);
  });

  it('without a partition the same apply is refused (keys of several slots): the hash tag is what makes it work', async () => {
    const redis = await connect();
    // ioredis refuses it before sending (auto-pipelined), else the server would answer CROSSSLOT.
    await assert.rejects(applyEvents(redis, keys.processing('c1'), [ev('e9', 'a', 1, [])], 60), /CROSSSLOT|should belong to the same slot/);
  });

  it("a blocking BLMOVE on a partition's own cluster connection waits for a push on another and moves it", async () => {
    const blocking = await connect({ partition: '{p3}:', name: 'outbox-take' });
    const writer = await connect({ partition: '{p3}:' });
    const list = keys.processing('c2');
    const taken = blocking.blmove(keys.events, list, 'LEFT', 'RIGHT', 5);
    // Wait until the BLMOVE is blocked on the master (CLIENT LIST shows it), then push.
    const master = direct[await masterOf(slotOf('{p3}:'))];
    await waitFor(async () => /name=outbox-take .*cmd=blmove/.test(String(await master.call('CLIENT', 'LIST'))));
    await writer.rpush(keys.events, 'm1');
    assert.equal(await taken, 'm1');
    assert.deepEqual(await writer.lrange(list, 0, -1), ['m1']);
    assert.deepEqual(await writer.lrange(keys.events, 0, -1), []);
  });

  it("the consumer's taking connection (a duplicate) blocks in BLMOVE and runs the take script on the cluster", async () => {
    const redis = await connect({ partition: '{p3}:' });
    const taker = await takingConnection(redis);
    opened.push(taker);
    const list = keys.processing('c3');
    const taken = taker.blmove(keys.events, list, 'LEFT', 'RIGHT', 5);
    await redis.rpush(keys.events, 'm2', 'm3');
    assert.equal(await taken, 'm2');
    assert.deepEqual((await moveToProcessing(taker, list, 10)).map(String), ['m3']);
    assert.deepEqual(await redis.lrange(list, 0, -1), ['m2', 'm3']);
  });
});

describe('SCAN and UNLINK across masters', () => {
  it('scanKeys finds the keys of every master, unlinkAll deletes them slot by slot, other namespaces stay', async () => {
    const redis = await connect({ namespace: 'scan' });
    const other = await connect({ namespace: 'other' });
    const ids = Array.from({ length: 300 }, (_, i) => `e${i}`);
    for (const id of ids) await redis.set(keys.seen(id), '1');
    await redis.rpush(keys.processing('a'), 'x');
    await redis.rpush(keys.processing('b'), 'y');
    await other.set(keys.seen('e1'), '1');
    const masters = new Set((await allKeys()).filter((k) => k.key.startsWith('scan:')).map((k) => k.master));
    assert.equal(masters.size, 3, 'the keys are spread over every master');

    const found = [];
    for await (const key of scanKeys(redis, keys.seen('*'))) found.push(key);
    assert.deepEqual(found.sort(), ids.map((id) => keys.seen(id)).sort());
    const lists = [];
    for await (const list of processingLists(redis)) lists.push(list);
    assert.deepEqual(lists.sort(), [keys.processing('a'), keys.processing('b')]);

    assert.equal(await unlinkAll(redis, scanKeys(redis, '*')), 302);
    assert.deepEqual((await allKeys()).filter((k) => k.key.startsWith('scan:')), []);
    assert.equal(await other.get(keys.seen('e1')), '1');
  });
});

describe('a master restarting', () => {
  it('with its data kept: the same connection (reconnect) serves the partition again, its keys there', async () => {
    const redis = await connect({ partition: '{p4}:', reconnect: true });
    await redis.hset(keys.meta, 'store', STORE);
    const master = await masterOf(slotOf('{p4}:'));
    await cluster.restart(master);
    assert.equal(await redis.hget(keys.meta, 'store'), STORE);
    await redis.hset(keys.meta, 'after', 'restart');
    assert.equal(await direct[master].hget(`{p4}:${keys.meta}`, 'after'), 'restart');
    // The restarted master has lost its script cache: EVALSHA's NOSCRIPT falls back to EVAL.
    const sha = createHash('sha1').update(readFileSync(new URL('../shared/outbox/redis/lua/push-events-3.lua', import.meta.url))).digest('hex');
    assert.deepEqual(await direct[master].call('SCRIPT', 'EXISTS', sha), [0]);
    const pushed = await pushEvents(redis, STORE, ['m']);
    assert.equal(pushed.status === 'ok' && pushed.pushed, 1);
    assert.deepEqual(await direct[master].call('SCRIPT', 'EXISTS', sha), [1]);
  });

  it('with its data kept: every write it acknowledged is there again, even one answered while its disk was still syncing an earlier write', async (t) => {
    if (!(await reachableHere(t))) return;
    const redis = await connect({ partition: '{p10}:', reconnect: true });
    const master = await masterOf(slotOf('{p10}:'));
    try {
      // The restart below SIGKILLs the master where an everysec one holds a write it answered but has not written.
      const { acked, answeredUnwritten } = await writeWhileSyncing(redis, direct[master]);
      await cluster.restart(master);
      assert.equal(Number(await redis.get('acked')), acked, lastAckedMessage(answeredUnwritten));
    } finally {
      // Not left in the master's AOF for the later restarts of this file.
      await redis.del('bulk');
    }
  });

  it('a command sent while the master is down (reconnect) waits, and completes once it is back', async () => {
    const redis = await connect({ partition: '{p6}:', reconnect: true });
    await redis.set('before', '1');
    const master = await masterOf(slotOf('{p6}:'));
    await cluster.kill(master);
    const pending = redis.incr('counter');
    let settled = false;
    void pending.finally(() => (settled = true)).catch(() => {});
    await cluster.restart(master);
    assert.equal(await pending, 1, `settled while down: ${settled}`);
    assert.equal(await redis.get('before'), '1');
  });

  it('a command sent while the master is down (no reconnect, the CLI) fails rather than waits', async () => {
    const redis = await connect({ partition: '{p7}:' });
    await redis.set('before', '1');
    const master = await masterOf(slotOf('{p7}:'));
    await cluster.kill(master);
    try {
      await assert.rejects(redis.get('before'));
    } finally {
      await cluster.restart(master);
    }
  });

  it('connectClusterUntilReady waits for a cluster it cannot reach yet, logging each retry; the loss and return of a master are logged', async () => {
    const master = 0;
    await cluster.kill(master);
    const lines: string[] = [];
    const log = createLogger('test', (line) => lines.push(line));
    let connected: Redis | undefined;
    const connecting = connectClusterUntilReady([cluster.nodes[master]], { log, partition: '{p8}:', connectTimeoutMs: 1000 }).then((redis) => (connected = redis));
    await waitFor(() => lines.some((line) => line.includes('"msg":"redis unavailable, retrying"') && line.includes(`cluster ${cluster.nodes[master]}`)));
    assert.equal(connected, undefined);
    await cluster.restart(master);
    const redis = await connecting;
    opened.push(redis);
    assert.equal(await redis.set('k', 'v'), 'OK');

    const own = await masterOf(slotOf('{p8}:'));
    await cluster.kill(own);
    const node = `"node":"${cluster.nodes[own]}"`;
    await waitFor(() => lines.some((line) => line.includes('"msg":"redis connection lost, reconnecting"') && line.includes(node)), { message: lines.join('') });
    await cluster.restart(own);
    await waitFor(() => lines.some((line) => line.includes('"msg":"redis reconnected"') && line.includes(node)), { message: lines.join('') });
    assert.equal(await redis.get('k'), 'v');
  });

  it('wiped (its AOF and RDB gone, its slots kept): the partition serves again, empty', async () => {
    const redis = await connect({ partition: '{p5}:', reconnect: true });
    await redis.hset(keys.meta, 'store', STORE);
    const master = await masterOf(slotOf('{p5}:'));
    await cluster.restart(master, { wipe: true });
    assert.equal(await redis.exists(keys.meta), 0);
    assert.equal(await masterOf(slotOf('{p5}:')), master);
  });
});
