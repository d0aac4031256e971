import type { Pool } from 'pg';
import { relaySettings, type RelayConfig } from '../../shared/runtime/config/relay-config.js';
import { redactUrl } from '../../shared/outbox/config.js';
import { ConfigError } from '../../shared/outbox/errors/config-error.js';
import { OutboxError } from '../../shared/outbox/errors/outbox-error.js';
import { incidentLog } from '../../shared/outbox/incident-log.js';
import type { Logger } from '../../shared/outbox/logger.js';
import { sleep } from '../../shared/outbox/sleep.js';
import { checkPgStore } from '../../shared/runtime/health/checks.js';
import { watchDatabase } from '../../shared/outbox/store/live-database.js';
import { attachApp } from '../../shared/runtime/attached-apps.js';
import { closePartitions, connectTargetPartitions, connectTargetUntilReady } from '../../shared/outbox/redis/connect-partitions.js';
import { watchRedisMemory } from '../../shared/outbox/redis/settings.js';
import { checkPartitionLayout } from '../../shared/outbox/redis/partition-layout.js';
import { startPruneWorker } from '../../shared/operations/prune/prune-worker.js';
import { startRelayWorker } from '../../shared/outbox/relay/relay-worker.js';
import { runApp } from '../../shared/runtime/run-app.js';
import { healthEndpointOf, HEALTH_PORT_SETTINGS } from '../../shared/runtime/health/health-settings.js';
import { startHealthServer } from '../../shared/runtime/health/health-server.js';
import { relayHealth } from '../../shared/runtime/health/relay-health.js';
import { appMetrics } from '../../shared/runtime/metrics/app-metrics.js';

runApp('outbox-relay', relaySettings, async (config, log, signal) => {
  if (config.databaseUrl !== '') return startOnPostgres(config, log, signal);
  if (config.redisCluster) throw new ConfigError('the relay app on app.db runs on one Redis (its BullMQ job): unset OUTBOX_REDIS_CLUSTER, or use the PostgreSQL store (OUTBOX_DATABASE_URL) on a cluster');
  const detach = attachApp(config.dir, 'outbox-relay');
  // Without a valid app.db it waits (relay passes do nothing) until `outbox init` (or a service's
  // createOutbox) made one. Any service's database with the library's tables: it carries any events.
  const database = watchDatabase(config.dir, { log, app: 'relay', stopped: 'not relaying', outboxOnly: true });
  const partitions = await connectTargetPartitions(config, (options) => connectTargetUntilReady(config, { name: 'outbox-relay', log, signal, requireNoEviction: true, ...options }));
  // Configured for another number of partitions than Redis holds: refused at start, not relayed.
  await checkPartitionLayout(partitions);
  const redis = partitions.clients[0];
  // A policy switched to eviction at run time, or a full Redis, said once per incident.
  const stopMemoryWatch = partitions.clients.map((client) => watchRedisMemory(client, log));
  const healthEndpoint = healthEndpointOf('relay', config.healthPort, config.healthHost);
  // /metrics is served next to /healthz, on the same listener: none when that is off.
  const metrics = healthEndpoint === null ? undefined : await appMetrics('outbox-relay');
  metrics?.watchStore(() => (database.check() ? database.current().db : null));
  metrics?.watchQueue(partitions);
  const worker = await startRelayWorker(database, partitions, config.redisUrl, log, {
    everyMs: config.everyMs,
    sliceMs: config.sliceMs,
    pollMs: config.pollMs,
    batchSize: config.batchSize,
    lockDurationMs: config.lockDurationMs,
    statsEveryMs: config.statsEveryMs,
    metrics,
  });
  const identity = { app: 'outbox-relay', dir: config.dir, namespace: config.namespace };
  const health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.relay.env, () => relayHealth(identity, database, redis, worker.stats), log, metrics);
  const pruneOlderThanMs = config.pruneOlderThanMs;
  const pruner = await startConfiguredPrune(database, partitions, config, log, false);
  log.info('relay started', {
    redis: config.redisUrl,
    partitions: config.partitions,
    db: `${config.dir}/app.db`,
    everyMs: config.everyMs,
    sliceMs: config.sliceMs,
    pollMs: config.pollMs,
    batchSize: config.batchSize,
    lockDurationMs: config.lockDurationMs,
    pruneOlderThanMs: pruneOlderThanMs ?? 'off',
    ...(pruneOlderThanMs === undefined ? {} : { pruneEveryMs: config.pruneEveryMs }),
  });
  return async () => {
    for (const stop of stopMemoryWatch) stop();
    await health.close();
    await pruner?.close();
    await worker.close();
    await closePartitions(partitions);
    database.close();
    detach();
  };
});

/**
 * The relay on the PostgreSQL store (OUTBOX_DATABASE_URL / --database): a loop of passes without the
 * BullMQ job (FOR UPDATE SKIP LOCKED lets any number of relays run at once), with the same batch
 * size, poll and slice, health endpoint, metrics and prune schedule; --every and --lock-duration do
 * not apply. Waits, logging once, until PostgreSQL answers with the outbox tables.
 */
async function startOnPostgres(config: RelayConfig, log: Logger, signal: AbortSignal): Promise<() => Promise<void>> {
  const { assertPgOutbox, openPg } = await import('../../shared/runtime/postgres.js');
  const { startPgRelayLoop } = await import('../../shared/outbox/postgres/pg-relay-loop.js');
  const waiting = incidentLog(log);
  let pool: Pool | undefined;
  while (pool === undefined) {
    try {
      pool = await openPg(config.databaseUrl, { max: 2, name: 'outbox-relay' });
      await assertPgOutbox(pool);
    } catch (error) {
      await pool?.end().catch(() => {});
      pool = undefined;
      if (!(error instanceof OutboxError)) throw error;
      waiting.warn('waiting for the PostgreSQL store: not relaying', { error: error.message });
      await sleep(1000, signal);
      if (signal.aborted) throw error;
    }
  }
  const { attachPgApp } = await import('../../shared/runtime/pg-attached-apps.js');
  const detach = await attachPgApp(config.databaseUrl, 'outbox-relay', log);
  const partitions = await connectTargetPartitions(config, (options) => connectTargetUntilReady(config, { name: 'outbox-relay', log, signal, requireNoEviction: true, ...options }));
  await checkPartitionLayout(partitions);
  const redis = partitions.clients[0];
  // A policy switched to eviction at run time, or a full Redis, said once per incident.
  const stopMemoryWatch = partitions.clients.map((client) => watchRedisMemory(client, log));
  const healthEndpoint = healthEndpointOf('relay', config.healthPort, config.healthHost);
  const metrics = healthEndpoint === null ? undefined : await appMetrics('outbox-relay');
  metrics?.watchStore(pool);
  metrics?.watchQueue(partitions);
  const loop = startPgRelayLoop(pool, partitions, log, { sliceMs: config.sliceMs, pollMs: config.pollMs, batchSize: config.batchSize, statsEveryMs: config.statsEveryMs });
  const identity = { app: 'outbox-relay', dir: config.dir, namespace: config.namespace };
  const store = pool;
  const health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.relay.env, () => relayHealth(identity, () => checkPgStore(store), redis, loop.stats), log, metrics);
  const pruneOlderThanMs = config.pruneOlderThanMs;
  // On a Redis Cluster the schedule is a timer in each relay (BullMQ's connections reach one Redis).
  const pruner = await startConfiguredPrune(store, partitions, config, log, Boolean(config.redisCluster));
  log.info('relay started', {
    redis: config.redisCluster || config.redisUrl,
    partitions: config.partitions,
    database: redactUrl(config.databaseUrl),
    sliceMs: config.sliceMs,
    pollMs: config.pollMs,
    batchSize: config.batchSize,
    pruneOlderThanMs: pruneOlderThanMs ?? 'off',
    ...(pruneOlderThanMs === undefined ? {} : { pruneEveryMs: config.pruneEveryMs }),
  });
  return async () => {
    for (const stop of stopMemoryWatch) stop();
    await health.close();
    await pruner?.close();
    await loop.close();
    await closePartitions(partitions);
    await store.end();
    await detach();
  };
}

/** The prune schedule the settings ask for (OUTBOX_PRUNE_OLDER_THAN, OUTBOX_PRUNE_EVERY); none when it is off. */
async function startConfiguredPrune(
  store: Parameters<typeof startPruneWorker>[0],
  partitions: Parameters<typeof startPruneWorker>[1],
  config: { pruneOlderThanMs?: number; pruneEveryMs: number; redisUrl: string },
  log: Logger,
  cluster: boolean,
) {
  if (config.pruneOlderThanMs === undefined) return undefined;
  return startPruneWorker(store, partitions, config.redisUrl, log, { olderThanMs: config.pruneOlderThanMs, everyMs: config.pruneEveryMs, ...(cluster ? { cluster } : {}) });
}
