import { Piscina } from 'piscina';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import type { HandlerResult } from '../../shared/consumer/effect.js';
import { startConsumer } from '../../shared/consumer/run-consumer.js';
import type { OutboxEvent } from '../../shared/events.js';
import { closeRedis, connectUntilReady } from '../../shared/redis/connect.js';
import { runApp } from '../../shared/run-app.js';
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
  })
  .strict()
  .parseSync();

runApp('outbox-consumer', async (log, signal) => {
  const config = configOf(argv);
  // A fixed pool: piscina's default idleTimeout of 0 would stop an idle thread and start it again (module loading
  // included) for the next task, adding tens of ms of latency.
  const pool = new Piscina({
    filename: new URL('./handler-worker.js', import.meta.url).href,
    minThreads: argv.threads,
    maxThreads: argv.threads,
    idleTimeout: 60_000,
  });
  const cpuCostMs = argv['cpu-cost'];
  const handler = (events: OutboxEvent[]) => pool.run({ events, cpuCostMs }) as Promise<HandlerResult[]>;
  const redis = await connectUntilReady(config.redisUrl, { name: 'outbox-consumer', log, signal, namespace: config.namespace, requireNoEviction: true });
  const connectBlocking = () => connectUntilReady(config.redisUrl, { name: 'outbox-consumer-take', log, signal, reconnect: false, namespace: config.namespace });
  const consumer = startConsumer(redis, connectBlocking, log, { consumerId: argv['consumer-id'], handler, lanes: argv.threads, batchSize: argv['batch-size'] });
  log.info('consumer started', { redis: config.redisUrl, consumerId: argv['consumer-id'], threads: argv.threads, cpuCostMs });
  return async () => {
    await consumer.stop();
    await pool.destroy();
    await closeRedis(redis);
  };
});
