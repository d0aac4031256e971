import { DEFAULT_MAX_ATTEMPTS } from '../../outbox/consumer/consumer.js';
import { parseHandlerFault } from '../../outbox/consumer/handler-fault.js';
import { count, custom, duration, optionalDuration, readSettings, text, type Argv, type ValuesOf } from './settings.js';
import { healthSettings } from './health-config.js';
import { storeSettings } from './store-settings.js';

const CONSUMER_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** The consumer's name (its processing list): the consumer app and `outbox consume` share the definition. */
export const consumerId = text({
  flag: 'consumer-id',
  env: 'OUTBOX_CONSUMER_ID',
  default: (env) => `consumer-${env.NODE_APP_INSTANCE || '0'}`,
  defaultText: 'consumer-<pm2 instance>',
  range: '1-64 letters, digits, ".", "_" or "-"',
  describe: 'names the processing list; a rerun with the same id recovers what a crash left there',
  check: (value) => (CONSUMER_ID.test(value) ? undefined : 'must be 1-64 letters, digits, ".", "_" or "-"'),
});

/** Messages taken per round. */
export const consumerBatchSize = count({ flag: 'batch-size', env: 'OUTBOX_CONSUMER_BATCH_SIZE', default: '500', min: 1, max: 100_000, describe: 'messages taken per round, at most' });

/** Handler attempts at an event before it is dead-lettered. */
export const maxAttempts = count({
  flag: 'max-attempts',
  env: 'OUTBOX_MAX_ATTEMPTS',
  default: String(DEFAULT_MAX_ATTEMPTS),
  min: 1,
  max: 1000,
  describe: 'handler attempts at an event before it is dead-lettered; a failed one is retried after a backoff',
});

/** How long applied events' records are kept; beyond it the seq guard tells a duplicate. */
export const dedupeWindow = duration({
  flag: 'dedupe-window',
  env: 'OUTBOX_DEDUPE_WINDOW',
  default: '7d',
  min: 1000,
  max: 2 ** 31 * 1000,
  describe: "how long an applied event's dedupe marker, processed entry and apply count are kept; beyond it the aggregate's seq guard tells a duplicate",
});

/** Drops the guard of an aggregate idle for longer than this; off keeps guards for good. */
export const aggregateHorizon = optionalDuration({
  flag: 'aggregate-horizon',
  env: 'OUTBOX_AGGREGATE_HORIZON',
  min: 1000,
  max: 2 ** 31 * 1000,
  describe: "drops the seq guard of an aggregate idle for longer than this; at least the dedupe window, and longer than any event takes from commit to apply",
});

/** The consumer app's settings (outbox-consumer), each with its flag, variable and default. */
export const consumerSettings = {
  // Not databaseUrl: the consumer reads Redis only, whichever store the relay reads.
  dir: storeSettings.dir,
  redisUrl: storeSettings.redisUrl,
  namespace: storeSettings.namespace,
  redisCluster: storeSettings.redisCluster,
  partitions: storeSettings.partitions,
  /** With partitions: how long a consumer's lease on one lasts without renewal. Default 5s. */
  partitionLeaseMs: duration({
    flag: 'partition-lease',
    env: 'OUTBOX_PARTITION_LEASE',
    default: '5s',
    min: 500,
    max: 600_000,
    describe: 'with partitions: how long a lease on one lasts unrenewed; a consumer that dies leaves its partitions to the others after about this long',
  }),
  /** Default `consumer-<pm2 instance>`. */
  consumerId,
  /** Handler worker threads (piscina), one lane each. Default 2. */
  threads: count({ flag: 'threads', env: 'OUTBOX_HANDLER_THREADS', default: '2', min: 1, max: 64, describe: 'handler worker threads' }),
  /** Simulated CPU work per event (fractions of a ms kept). Default 0ms. */
  cpuCostMs: duration({ flag: 'cpu-cost', env: 'OUTBOX_HANDLER_CPU', retired: ['OUTBOX_HANDLER_CPU_MS'], default: '0ms', max: 10_000, fractional: true, describe: 'simulated CPU work per event, e.g. 0.2ms' }),
  /** Default 500. */
  batchSize: consumerBatchSize,
  /** How long one handler task may run before its thread is stopped and the attempt fails. Default 5s. */
  handlerTimeoutMs: duration({
    flag: 'handler-timeout',
    env: 'OUTBOX_HANDLER_TIMEOUT',
    retired: ['OUTBOX_HANDLER_TIMEOUT_MS'],
    default: '5s',
    min: 1,
    max: 3_600_000,
    describe: 'how long one handler task (a lane of a round, or one retried event) may run before its thread is stopped and the attempt fails',
  }),
  /** Default 5. */
  maxAttempts,
  /** Default 7d. */
  dedupeWindowMs: dedupeWindow,
  /** Default off. */
  aggregateHorizonMs: aggregateHorizon,
  /** Injected handler failures, for tests and chaos (shared/outbox/consumer/handler-fault.ts). Default off. */
  handlerFault: custom({ env: 'OUTBOX_HANDLER_FAIL', default: '', defaultText: 'off', describe: 'injected handler failures (shared/outbox/consumer/handler-fault.ts), for tests and chaos', parse: (raw) => parseHandlerFault(raw) }),
  /** A file whose contents, while it exists, replace `handlerFault`. Default none. */
  handlerFaultFile: text({ env: 'OUTBOX_HANDLER_FAIL_FILE', default: '', defaultText: 'off', range: 'a path', describe: 'a file whose contents replace OUTBOX_HANDLER_FAIL while it exists' }),
  ...healthSettings('consumer'),
};

export type ConsumerConfig = ValuesOf<typeof consumerSettings>;

/** The consumer app's settings from the flags, else the environment, else the defaults; checked. */
export function consumerConfig(argv: Argv = {}, env: NodeJS.ProcessEnv = process.env): ConsumerConfig {
  return readSettings(consumerSettings, argv, env);
}
