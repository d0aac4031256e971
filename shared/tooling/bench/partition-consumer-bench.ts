import { fork, type ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { INVENTORY_KEY } from '../../lab/orders/order-keys.js';
import { closePartitions, connectTarget, connectTargetPartitions, type RedisTarget } from '../../outbox/redis/connect-partitions.js';
import { keys } from '../../outbox/redis/keys.js';
import { byPartition, partitionTag, type Partitions } from '../../outbox/redis/partitions.js';
import { testClient } from '../local/redis-server.js';
import { benchMessages, BENCH_STORE, checkReserved, expectedReserved } from './consumer-bench.js';
import { median, rate, type Rate } from './measure.js';
import { WARM_UP_NAMESPACE, type ChildReport, type ChildTask } from './partition-consumer-child.js';
import { progress } from './progress.js';
import { machineIdle, redisCpuMs } from './cpu-time.js';
import { mastersOfPartitions, spreadPartitions } from './spread-partitions.js';

/** Where a run's partitions live: one Redis, or the cluster. */
export type ConsumerSetup = 'redis' | 'cluster';

export interface PartitionRun {
  setup: ConsumerSetup;
  partitions: number;
  /** Cluster masters the partitions' hash slots fall on (1 for one Redis). */
  masters: number;
  /** Applied (distinct) events/s: all of them over the first drain's start to the last drain's end. */
  applied: Rate;
  /**
   * CPU time per applied event in that (median) run, µs: of the consumer processes together
   * (process.cpuUsage over each drain), and of the Redis servers together (INFO cpu of the one Redis,
   * or of every master, before the drains and after the last).
   */
  consumerCpuUs: number;
  redisCpuUs: number;
  /** The share of the whole machine's CPU that stayed idle during that run (0-1): other work on it counts too. */
  machineIdle: number;
}

interface Measured {
  rate: Rate;
  consumerCpuMs: number;
  redisCpuMs: number;
  machineIdle: number;
}

const CONFIGS: { setup: ConsumerSetup; partitions: number }[] = [
  { setup: 'redis', partitions: 1 },
  { setup: 'cluster', partitions: 1 },
  { setup: 'cluster', partitions: 2 },
  { setup: 'cluster', partitions: 4 },
];

const childUrl = new URL('./partition-consumer-child.js', import.meta.url);

function nextReport(child: ChildProcess): Promise<ChildReport> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`a consumer process exited with ${code} before reporting`));
    child.once('exit', onExit);
    child.once('message', (report: ChildReport) => {
      child.off('exit', onExit);
      if ('error' in report) reject(new Error(`a consumer process failed: ${report.error}`));
      else resolve(report);
    });
  });
}

/** Deletes every key of every partition: FLUSHALL on the one Redis or on each cluster master. */
const serversOf = (target: RedisTarget, nodes: string[]) => (target.redisCluster ? nodes.map((node) => `redis://${node}`) : [target.redisUrl]);

async function flush(target: RedisTarget, nodes: string[]): Promise<void> {
  for (const url of serversOf(target, nodes)) {
    const client = testClient(url);
    try {
      await client.flushall();
    } finally {
      client.disconnect();
    }
  }
}

/** One partition made to serve the bench's store, with `messages` queued in their order. */
async function queue(redis: Redis, messages: string[]): Promise<void> {
  await redis.hset(keys.meta, 'store', BENCH_STORE);
  for (let i = 0; i < messages.length; i += 1000) await redis.rpush(keys.events, ...messages.slice(i, i + 1000));
}

/** Each partition given its share of `messages` (grouped by aggregate, order kept). */
async function fill(partitions: Partitions, messages: string[]): Promise<void> {
  const groups = byPartition(partitions, messages, (message) => (JSON.parse(message) as { aggregate_id: string }).aggregate_id);
  await Promise.all(partitions.clients.map((redis, index) => queue(redis, groups.get(index) ?? [])));
}

/** Every distinct event applied once over the partitions, and the reservations they add up to. */
async function check(partitions: Partitions, events: number, where: string): Promise<void> {
  let applied = 0;
  const reserved = new Map<string, number>();
  for (const redis of partitions.clients) {
    applied += Number(await redis.hget(keys.stats, 'applied'));
    for (const [sku, qty] of Object.entries(await redis.hgetall(INVENTORY_KEY))) reserved.set(sku, (reserved.get(sku) ?? 0) + Number(qty));
  }
  if (applied !== events) throw new Error(`the consumers (${where}) applied ${applied} of ${events} unique events`);
  checkReserved(`the consumers (${where})`, reserved, expectedReserved(events));
}

/**
 * One run: the partitions filled with their share of `messages`, one consumer process per partition
 * (forked, connected and ready before the clock starts), all told to drain at once.
 */
async function runOnce(target: RedisTarget, nodes: string[], events: number, messages: string[], warmUp: string[], tick: (n: number) => void): Promise<Measured> {
  await flush(target, nodes);
  const partitions = await connectTargetPartitions(target, (options) => connectTarget(target, options));
  const warmUpTarget = { ...target, namespace: WARM_UP_NAMESPACE };
  const warmUpPartitions = await connectTargetPartitions(warmUpTarget, (options) => connectTarget(warmUpTarget, options));
  const children: ChildProcess[] = [];
  try {
    await fill(partitions, messages);
    // Each partition gets the whole warm-up set: every process warms up on as many events.
    await Promise.all(warmUpPartitions.clients.map((redis) => queue(redis, warmUp)));
    const count = target.partitions ?? 1;
    for (let index = 0; index < count; index += 1) children.push(fork(childUrl, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    const ready = children.map((child, index) => {
      const report = nextReport(child);
      const task: ChildTask = { target, partition: partitionTag(index, count, Boolean(target.redisCluster)), consumerId: `bench-${index}` };
      child.send(task);
      return report;
    });
    await Promise.all(ready);
    const done = children.map((child) => nextReport(child));
    const redisCpuBefore = await redisCpuMs(serversOf(target, nodes));
    const idle = machineIdle();
    for (const child of children) child.send('go');
    const reports = (await Promise.all(done)) as { startedAt: number; endedAt: number; applied: number; cpuMs: number }[];
    const idleShare = idle();
    const redisUsed = (await redisCpuMs(serversOf(target, nodes))) - redisCpuBefore;
    tick(messages.length);
    await check(partitions, events, `${count} partition${count > 1 ? 's' : ''} on ${target.redisCluster ? 'the cluster' : 'one Redis'}`);
    const startedAt = Math.min(...reports.map((r) => r.startedAt));
    const endedAt = Math.max(...reports.map((r) => r.endedAt));
    return { rate: rate(events, endedAt - startedAt), consumerCpuMs: reports.reduce((sum, r) => sum + r.cpuMs, 0), redisCpuMs: redisUsed, machineIdle: idleShare };
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await closePartitions(partitions);
    await closePartitions(warmUpPartitions);
  }
}

/**
 * The consumer (createConsumer with the lab's Redis-effects handler set, in each process's main
 * thread) on the same `events` distinct messages plus 10 % re-deliveries (pushed ahead): 1 partition
 * on one Redis, then 1, 2 and 4 partitions on the cluster (spread over its masters first), one
 * process per partition. `rounds` rounds, the order reversed every other round (median of each).
 */
export async function benchPartitionConsumers(redisUrl: string, clusterNodes: string[], events: number, rounds: number): Promise<PartitionRun[]> {
  await spreadPartitions(clusterNodes, Math.max(...CONFIGS.map((config) => config.partitions)));
  const messages = benchMessages(events);
  const warmUp = benchMessages(Math.min(2000, Math.ceil(events / 4)));
  const bar = progress('scale-out: consumers per partition', rounds * CONFIGS.length * messages.length);
  const runs = CONFIGS.map(() => [] as Measured[]);
  const targetOf = ({ setup, partitions }: (typeof CONFIGS)[number]): RedisTarget =>
    setup === 'redis' ? { redisUrl, partitions } : { redisUrl: '', redisCluster: clusterNodes.join(','), partitions };
  for (let round = 0; round < rounds; round += 1) {
    const order = CONFIGS.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) runs[i].push(await runOnce(targetOf(CONFIGS[i]), clusterNodes, events, messages, warmUp, (n) => bar.tick(n)));
  }
  bar.finish();
  const result: PartitionRun[] = [];
  for (const [i, config] of CONFIGS.entries()) {
    const masters = config.setup === 'redis' ? 1 : new Set(await mastersOfPartitions(clusterNodes, config.partitions)).size;
    const applied = median(runs[i].map((run) => run.rate));
    const { consumerCpuMs, redisCpuMs: redisMs, machineIdle: idleShare } = runs[i].find((run) => run.rate === applied)!;
    result.push({ ...config, masters, applied, consumerCpuUs: (consumerCpuMs * 1000) / events, redisCpuUs: (redisMs * 1000) / events, machineIdle: idleShare });
  }
  return result;
}

/**
 * A small drain (`events` distinct messages plus 10 % re-deliveries) in a new process of its own:
 * started, connected and its consumer created before the clock starts, but no event handled before
 * (no warm-up drain), as `outbox consume` or a consumer app just started meets them. `rounds` runs,
 * each in a new process (median).
 */
export async function benchSmallRun(redisUrl: string, events: number, rounds: number): Promise<Rate> {
  const messages = benchMessages(events);
  const runs: Rate[] = [];
  const bar = progress(`consumer: ${events} events in a new process`, rounds * messages.length);
  for (let round = 0; round < rounds; round += 1) runs.push((await runOnce({ redisUrl, partitions: 1 }, [], events, messages, [], (n) => bar.tick(n))).rate);
  bar.finish();
  return median(runs);
}
