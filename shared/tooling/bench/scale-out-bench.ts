import { loadavg } from 'node:os';
import type { Redis } from 'ioredis';
import { startRedisCluster } from '../local/redis-cluster.js';
import { testClient } from '../local/redis-server.js';
import { createBenchDatabase } from './bench-database.js';
import { benchPartitionConsumers, type PartitionRun } from './partition-consumer-bench.js';
import { benchPgProducer, type PgProducerFigures } from './pg-producer-bench.js';
import { benchPgRelays, type PgRelayRun } from './pg-relay-bench.js';

export interface ScaleOutFigures {
  producer: PgProducerFigures;
  /** 1, 2 and 4 relays, in that order. */
  relays: PgRelayRun[];
  /** 1 partition on one Redis, then 1, 2 and 4 partitions on the cluster, in that order. */
  consumers: PartitionRun[];
  /** The database the stage created on the PostgreSQL server (and dropped at its end). */
  database: string;
  /** 1-minute load average at the start and at the end of the stage (other work on the machine). */
  loadAverage: { start: number; end: number };
}

/** Redis Cluster nodes write no AOF during the bench, as the bench's one Redis does not: the code is measured, not the disk. */
async function withoutPersistence(nodes: string[]): Promise<void> {
  for (const node of nodes) {
    const client = testClient(`redis://${node}`);
    try {
      await client.config('SET', 'appendonly', 'no');
    } finally {
      client.disconnect();
    }
  }
}

/**
 * The scale-out path, in one run: the PostgreSQL producer on 1 and 8 connections, 1, 2 and 4
 * PostgreSQL relays at once, and consumers on 1 partition of one Redis against 1, 2 and 4 partitions
 * of a private 3-master Redis Cluster. Its own database on the PostgreSQL server of `postgresUrl`
 * (created, then dropped) and the bench's own Redis (`redisUrl`, emptied before and after).
 */
export async function benchScaleOut(postgresUrl: string, redisUrl: string, redis: Redis, sizes: { transactions: number; relayRows: number; consumerEvents: number; rounds: number }): Promise<ScaleOutFigures> {
  const start = loadavg()[0];
  const db = await createBenchDatabase(postgresUrl);
  try {
    await redis.flushall();
    const producer = await benchPgProducer(db, sizes.transactions, sizes.rounds);
    const relays = await benchPgRelays(db, redisUrl, redis, sizes.relayRows, sizes.rounds);
    const cluster = await startRedisCluster();
    try {
      await withoutPersistence(cluster.nodes);
      const consumers = await benchPartitionConsumers(redisUrl, cluster.nodes, sizes.consumerEvents, sizes.rounds);
      return { producer, relays, consumers, database: db.name, loadAverage: { start, end: loadavg()[0] } };
    } finally {
      await cluster.stop();
      await redis.flushall();
    }
  } finally {
    await db.drop();
  }
}
