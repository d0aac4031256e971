import { Piscina } from 'piscina';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { DEFAULT_MAX_ATTEMPTS } from '../../shared/consumer/consumer.js';
import type { HandlerResult } from '../../shared/consumer/effect.js';
import { handlerFaultSource, parseHandlerFault } from '../../shared/consumer/handler-fault.js';
import { startConsumer } from '../../shared/consumer/run-consumer.js';
import type { OutboxEvent } from '../../shared/events.js';
import { parseCount } from '../../shared/orders/validate.js';
import { closeRedis, connectUntilReady } from '../../shared/redis/connect.js';
import { runApp } from '../../shared/run-app.js';
import { consumerHealth } from '../../shared/consumer/consumer-health.js';
import { HEALTH_PORT_SETTINGS, healthEndpointOf, statsEveryMsOf } from '../../shared/health/health-settings.js';
import { startHealthServer } from '../../shared/health/health-server.js';
import { configOf, globalOptions } from '../cli/options.js';

const env = process.env;
const argv = yargs(hideBin(process.argv))
  .options({
    ...globalOptions,
    'consumer-id': {
      type: 'string',
      default: env.OUTBOX_CONSUMER_ID ?? `consumer-${env.NODE_APP_INSTANCE ?? '0'}`,
      describe: 'names the processing list [env OUTBOX_CONSUMER_ID, default consumer-<pm2 instance>]',
    },
    threads: { type: 'number', default: Number(env.OUTBOX_HANDLER_THREADS ?? 2), describe: 'handler worker threads [env OUTBOX_HANDLER_THREADS]' },
    'cpu-cost': { type: 'number', default: Number(env.OUTBOX_HANDLER_CPU_MS ?? 0), describe: 'simulated CPU work per event, ms [env OUTBOX_HANDLER_CPU_MS]' },
    'batch-size': { type: 'number', default: Number(env.OUTBOX_CONSUMER_BATCH_SIZE ?? 500), describe: 'messages taken per round, at most [env OUTBOX_CONSUMER_BATCH_SIZE]' },
    'handler-timeout': {
      type: 'string',
      default: env.OUTBOX_HANDLER_TIMEOUT_MS ?? '5000',
      describe: 'ms one handler task (a lane of a round, or one retried event) may run before its thread is stopped and the attempt fails [env OUTBOX_HANDLER_TIMEOUT_MS]',
    },
    'max-attempts': {
      type: 'string',
      default: env.OUTBOX_MAX_ATTEMPTS ?? String(DEFAULT_MAX_ATTEMPTS),
      describe: 'handler attempts at an event before it is dead-lettered [env OUTBOX_MAX_ATTEMPTS]',
    },
  })
  .strict()
  .parseSync();

/** What a rejected pool task means, in the words of the log line. */
function taskError(error: Error, timeoutMs: number): Error {
  return error.name === 'AbortError' ? new Error(`handler timed out after ${timeoutMs} ms (its worker thread was stopped)`) : new Error(`handler task lost: ${error.message}`);
}

runApp('outbox-consumer', async (log, signal) => {
  const config = configOf(argv);
  const timeoutMs = parseCount(argv['handler-timeout'], '--handler-timeout / OUTBOX_HANDLER_TIMEOUT_MS (ms)', 3_600_000);
  const maxAttempts = parseCount(argv['max-attempts'], '--max-attempts / OUTBOX_MAX_ATTEMPTS', 1000);
  // Checked here so that a bad value stops the app with one line; each task carries the fault in force.
  const fault = parseHandlerFault(env.OUTBOX_HANDLER_FAIL);
  const faultNow = handlerFaultSource(fault, env.OUTBOX_HANDLER_FAIL_FILE || undefined, log);
  const healthEndpoint = healthEndpointOf('consumer');
  const statsIntervalMs = statsEveryMsOf();
  // A fixed pool: piscina's default idleTimeout of 0 would stop an idle thread and start it again (module loading
  // included) for the next task, adding tens of ms of latency.
  const pool = new Piscina({
    filename: new URL('./handler-worker.js', import.meta.url).href,
    minThreads: argv.threads,
    maxThreads: argv.threads,
    idleTimeout: 60_000,
  });
  const cpuCostMs = argv['cpu-cost'];
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
  const consumerId = argv['consumer-id'];
  const consumer = startConsumer(redis, connectBlocking, log, { consumerId, handler, lanes: argv.threads, batchSize: argv['batch-size'], maxAttempts, statsIntervalMs, healthUrl: () => health?.url ?? null });
  const identity = { app: 'outbox-consumer', dir: config.dir, namespace: config.namespace, consumerId };
  health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.consumer.env, () => consumerHealth(identity, redis, consumer.consumerStats), log);
  log.info('consumer started', {
    redis: config.redisUrl,
    consumerId: argv['consumer-id'],
    threads: argv.threads,
    cpuCostMs,
    handlerTimeoutMs: timeoutMs,
    maxAttempts,
    ...(fault ? { injectedHandlerFailures: env.OUTBOX_HANDLER_FAIL } : {}),
    ...(env.OUTBOX_HANDLER_FAIL_FILE ? { injectedHandlerFailuresFile: env.OUTBOX_HANDLER_FAIL_FILE } : {}),
  });
  return async () => {
    await health?.close();
    await consumer.stop();
    await pool.destroy();
    await closeRedis(redis);
  };
});
