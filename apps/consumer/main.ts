import { Piscina } from 'piscina';
import { consumerSettings } from '../../shared/runtime/config/consumer-config.js';
import type { HandlerResult } from '../../shared/lab/orders/effect.js';
import { handlerFaultSource } from '../../shared/outbox/consumer/handler-fault.js';
import { startConsumer } from '../../shared/outbox/consumer/run-consumer.js';
import type { OutboxEvent } from '../../shared/outbox/store/events.js';
import { closeRedis, connectUntilReady } from '../../shared/outbox/redis/connect.js';
import { runApp } from '../../shared/runtime/run-app.js';
import { consumerHealth } from '../../shared/runtime/health/consumer-health.js';
import { healthEndpointOf, HEALTH_PORT_SETTINGS } from '../../shared/runtime/health/health-settings.js';
import { startHealthServer } from '../../shared/runtime/health/health-server.js';

/** What a rejected pool task means, in the words of the log line. */
function taskError(error: Error, timeoutMs: number): Error {
  return error.name === 'AbortError' ? new Error(`handler timed out after ${timeoutMs} ms (its worker thread was stopped)`) : new Error(`handler task lost: ${error.message}`);
}

runApp('outbox-consumer', consumerSettings, async (config, log, signal) => {
  const { handlerTimeoutMs: timeoutMs, cpuCostMs, threads } = config;
  // Each task carries the fault in force (OUTBOX_HANDLER_FAIL, or its file while that exists).
  const faultNow = handlerFaultSource(config.handlerFault, config.handlerFaultFile || undefined, log);
  // A fixed pool: piscina's default idleTimeout of 0 would stop an idle thread and start it again (module loading
  // included) for the next task, adding tens of ms of latency.
  const pool = new Piscina({
    filename: new URL('./handler-worker.js', import.meta.url).href,
    minThreads: threads,
    maxThreads: threads,
    idleTimeout: 60_000,
  });
  const handler = async (events: OutboxEvent[], attempts: number[]) => {
    try {
      return (await pool.run({ events, attempts, cpuCostMs, fault: faultNow() }, { signal: AbortSignal.timeout(timeoutMs) })) as HandlerResult[];
    } catch (error) {
      throw taskError(error as Error, timeoutMs);
    }
  };
  const redis = await connectUntilReady(config.redisUrl, { name: 'outbox-consumer', log, signal, namespace: config.namespace, requireNoEviction: true });
  const connectBlocking = () => connectUntilReady(config.redisUrl, { name: 'outbox-consumer-take', log, signal, reconnect: false, namespace: config.namespace });
  let health: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  const { consumerId } = config;
  const consumer = startConsumer(redis, connectBlocking, log, {
    consumerId,
    handler,
    lanes: threads,
    batchSize: config.batchSize,
    maxAttempts: config.maxAttempts,
    statsIntervalMs: config.statsEveryMs,
    healthUrl: () => health?.url ?? null,
  });
  const identity = { app: 'outbox-consumer', dir: config.dir, namespace: config.namespace, consumerId };
  const healthEndpoint = healthEndpointOf('consumer', config.healthPort, config.healthHost);
  health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.consumer.env, () => consumerHealth(identity, redis, consumer.consumerStats), log);
  log.info('consumer started', {
    redis: config.redisUrl,
    consumerId: config.consumerId,
    threads,
    cpuCostMs,
    batchSize: config.batchSize,
    handlerTimeoutMs: timeoutMs,
    maxAttempts: config.maxAttempts,
    ...(config.handlerFault ? { injectedHandlerFailures: process.env.OUTBOX_HANDLER_FAIL } : {}),
    ...(config.handlerFaultFile ? { injectedHandlerFailuresFile: config.handlerFaultFile } : {}),
  });
  return async () => {
    await health?.close();
    await consumer.stop();
    await pool.destroy();
    await closeRedis(redis);
  };
});
