import { consumerSettings } from '../../shared/runtime/config/consumer-config.js';
import { handlerFaultSource } from '../../shared/outbox/consumer/handler-fault.js';
import { createConsumer } from '../../shared/outbox/index.js';
import { closePartitions, connectTargetPartitions, connectTargetUntilReady } from '../../shared/outbox/redis/connect-partitions.js';
import { watchRedisMemory } from '../../shared/outbox/redis/settings.js';
import { runApp } from '../../shared/runtime/run-app.js';
import { consumerHealth } from '../../shared/runtime/health/consumer-health.js';
import { healthEndpointOf, HEALTH_PORT_SETTINGS } from '../../shared/runtime/health/health-settings.js';
import { startHealthServer } from '../../shared/runtime/health/health-server.js';
import { appMetrics } from '../../shared/runtime/metrics/app-metrics.js';

/** The lab's handler set (inventory reservation), run on the worker threads. */
const LAB_HANDLERS = new URL('../../shared/lab/orders/order-handlers.js', import.meta.url);

runApp('outbox-consumer', consumerSettings, async (config, log, signal) => {
  const { handlerTimeoutMs, cpuCostMs, threads } = config;
  // One connection per partition (one in all without partitions), each also used for the blocking takes' own.
  const partitions = await connectTargetPartitions(config, (options) => connectTargetUntilReady(config, { name: 'outbox-consumer', log, signal, requireNoEviction: true, ...options }));
  // A policy switched to eviction at run time, or a full Redis, said once per incident.
  const stopMemoryWatch = partitions.clients.map((client) => watchRedisMemory(client, log));
  const connectBlocking = (partition: string) => connectTargetUntilReady(config, { name: 'outbox-consumer-take', log, signal, reconnect: false, partition });
  let health: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  const { consumerId } = config;
  const outboxConsumer = await createConsumer({
    redis: partitions,
    partitionLeaseMs: config.partitionLeaseMs,
    handlers: LAB_HANDLERS,
    consumerId,
    threads,
    batchSize: config.batchSize,
    maxAttempts: config.maxAttempts,
    dedupeWindowMs: config.dedupeWindowMs,
    aggregateHorizonMs: config.aggregateHorizonMs,
    handlerTimeoutMs,
    cpuCostMs,
    // Each task carries the fault in force (OUTBOX_HANDLER_FAIL, or its file while that exists).
    fault: handlerFaultSource(config.handlerFault, config.handlerFaultFile || undefined, log),
  });
  const healthEndpoint = healthEndpointOf('consumer', config.healthPort, config.healthHost);
  // /metrics is served next to /healthz, on the same listener: none when that is off.
  const metrics = healthEndpoint === null ? undefined : await appMetrics('outbox-consumer');
  metrics?.watchQueue(partitions);
  const consumer = outboxConsumer.start({ log, connectBlocking, statsIntervalMs: config.statsEveryMs, healthUrl: () => health?.url ?? null, metrics });
  const identity = { app: 'outbox-consumer', dir: config.dir, namespace: config.namespace, consumerId };
  health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.consumer.env, () => consumerHealth(identity, partitions, consumer.consumerStats), log, metrics);
  log.info('consumer started', {
    redis: config.redisCluster || config.redisUrl,
    partitions: config.partitions,
    consumerId: config.consumerId,
    threads,
    cpuCostMs,
    batchSize: config.batchSize,
    handlerTimeoutMs,
    maxAttempts: config.maxAttempts,
    ...(config.handlerFault ? { injectedHandlerFailures: process.env.OUTBOX_HANDLER_FAIL } : {}),
    ...(config.handlerFaultFile ? { injectedHandlerFailuresFile: config.handlerFaultFile } : {}),
  });
  return async () => {
    for (const stop of stopMemoryWatch) stop();
    await health?.close();
    await consumer.stop();
    await outboxConsumer.close();
    await closePartitions(partitions);
  };
});
