import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { RedisServer, testClient } from '../local/redis-server.js';
import { defineScripts } from '../../outbox/redis/scripts.js';
import { benchCli, type CliFigures } from './cli-bench.js';
import { benchConsumer, type ConsumerFigures } from './consumer-bench.js';
import { benchEndToEnd, type EndToEndFigures } from './end-to-end-bench.js';
import { benchGrowth, type GrowthFigures } from './growth-bench.js';
import { benchProducer, type ProducerFigures } from './producer-bench.js';
import { benchRelay, type RelayFigures } from './relay-bench.js';
import { benchScaleOut, type ScaleOutFigures } from './scale-out-bench.js';
import { benchSoak, type SoakFigures, type SoakOptions } from './soak-bench.js';
import type { BenchStage } from './stages.js';
import { benchVerify, type VerifyFigures } from './verify-bench.js';
import { benchSmallRun } from './partition-consumer-bench.js';
import type { Rate } from './measure.js';

export interface BenchSizes {
  producerOrders: number;
  relayEvents: number;
  relayNaiveEvents: number;
  consumerEvents: number;
  consumerNaiveEvents: number;
  /** A small consumer run, in a new process: compared with the large one (consumerEvents). */
  consumerSmallEvents: number;
  growthPublished: number;
  growthPending: number;
  rssEvents: number;
  /** End to end under pm2, one run per rate (operations/s). */
  e2eRates: number[];
  e2eDurationMs: number;
  cliRuns: number;
  /** Scale-out: PostgreSQL producer transactions (each connection count), rows for the relays, distinct events for the consumers. */
  scaleOutTransactions: number;
  scaleOutRelayRows: number;
  scaleOutConsumerEvents: number;
  /** Scale-out: rounds of each comparison, alternating the order (median). */
  scaleOutRounds: number;
  /** The soak under pm2: its rate, length, window, horizon, prune age and period, and sampling period. */
  soak: SoakOptions;
  /** `outbox verify` over bulk-made histories of these many events, in this order (the first is the baseline). */
  verifyEvents: number[];
}

/** The sizes the issue asks for; --quick shrinks them for a smoke run. */
export const FULL: BenchSizes = {
  producerOrders: 20_000,
  relayEvents: 100_000,
  relayNaiveEvents: 5_000,
  consumerEvents: 100_000,
  consumerNaiveEvents: 5_000,
  consumerSmallEvents: 5_000,
  growthPublished: 1_000_000,
  growthPending: 20_000,
  rssEvents: 1_000_000,
  e2eRates: [2_000, 5_000],
  e2eDurationMs: 30_000,
  cliRuns: 20,
  scaleOutTransactions: 10_000,
  scaleOutRelayRows: 100_000,
  scaleOutConsumerEvents: 100_000,
  scaleOutRounds: 3,
  soak: { rate: 300, durationMs: 300_000, windowMs: 20_000, horizonMs: 40_000, pruneAfterMs: 20_000, pruneEveryMs: 5_000, sampleEveryMs: 10_000 },
  verifyEvents: [100_000, 1_000_000],
};

export const QUICK: BenchSizes = {
  producerOrders: 2_000,
  relayEvents: 5_000,
  relayNaiveEvents: 500,
  consumerEvents: 5_000,
  consumerNaiveEvents: 500,
  consumerSmallEvents: 1_000,
  growthPublished: 20_000,
  growthPending: 2_000,
  rssEvents: 20_000,
  e2eRates: [600],
  e2eDurationMs: 5_000,
  cliRuns: 3,
  scaleOutTransactions: 800,
  scaleOutRelayRows: 4_000,
  scaleOutConsumerEvents: 4_000,
  scaleOutRounds: 1,
  soak: { rate: 100, durationMs: 30_000, windowMs: 3_000, horizonMs: 6_000, pruneAfterMs: 3_000, pruneEveryMs: 1_000, sampleEveryMs: 2_000 },
  verifyEvents: [2_000, 20_000],
};

export interface BenchResult {
  at: string;
  machine: { cpus: number; model: string; node: string };
  sizes: BenchSizes;
  producer?: ProducerFigures;
  relay?: RelayFigures;
  consumer?: ConsumerFigures;
  /** `sizes.consumerSmallEvents` in a new process (median of 3): see benchSmallRun. */
  consumerSmall?: Rate;
  growth?: GrowthFigures;
  /** One per rate of `sizes.e2eRates`, in that order. */
  e2e?: EndToEndFigures[];
  cli?: CliFigures;
  scaleOut?: ScaleOutFigures;
  soak?: SoakFigures;
  verify?: VerifyFigures;
}

/**
 * Measures each stage of the real code and, in the same run and against the same private
 * redis-server (no persistence: the code is measured, not the disk), the raw limit and a naive
 * implementation, so that machine noise cancels in the ratios.
 */
export async function runBench(stages: BenchStage[], sizes: BenchSizes, postgresUrl: string): Promise<BenchResult> {
  const workspace = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const redis = await RedisServer.start([], join(workspace, 'redis'));
  const client = testClient(redis.url);
  defineScripts(client);
  const result: BenchResult = {
    at: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? 'unknown', node: process.version },
    sizes,
  };
  try {
    if (stages.includes('producer')) result.producer = await benchProducer(workspace, sizes.producerOrders);
    if (stages.includes('relay')) result.relay = await benchRelay(workspace, client, redis.url, sizes.relayEvents, sizes.relayNaiveEvents);
    if (stages.includes('consumer')) {
      result.consumer = await benchConsumer(client, redis.url, workspace, sizes.consumerEvents, sizes.consumerNaiveEvents);
      result.consumerSmall = await benchSmallRun(redis.url, sizes.consumerSmallEvents, 3);
    }
    if (stages.includes('growth')) {
      await client.flushall();
      result.growth = await benchGrowth(workspace, client, redis.url, sizes.growthPublished, sizes.growthPending, sizes.rssEvents);
      await client.flushall();
    }
    if (stages.includes('e2e')) {
      result.e2e = [];
      for (const rate of sizes.e2eRates) result.e2e.push(await benchEndToEnd(join(workspace, `e2e-${rate}`), rate, sizes.e2eDurationMs));
    }
    if (stages.includes('cli')) result.cli = await benchCli(workspace, client, redis.url, sizes.cliRuns);
    if (stages.includes('scale-out')) {
      result.scaleOut = await benchScaleOut(postgresUrl, redis.url, client, {
        transactions: sizes.scaleOutTransactions,
        relayRows: sizes.scaleOutRelayRows,
        consumerEvents: sizes.scaleOutConsumerEvents,
        rounds: sizes.scaleOutRounds,
      });
    }
    if (stages.includes('soak')) result.soak = await benchSoak(workspace, sizes.soak);
    if (stages.includes('verify')) result.verify = await benchVerify(workspace, sizes.verifyEvents);
    return result;
  } finally {
    client.disconnect();
    await redis.destroy();
    rmSync(workspace, { recursive: true, force: true });
  }
}
