import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { watchDatabase } from '../../shared/db/live-database.js';
import { attachApp } from '../../shared/local/attached-apps.js';
import { closeRedis, connectUntilReady } from '../../shared/redis/connect.js';
import { parseDuration } from '../../shared/duration.js';
import { startPruneWorker } from '../../shared/relay/prune-worker.js';
import { startRelayWorker } from '../../shared/relay/relay-worker.js';
import { runApp } from '../../shared/run-app.js';
import { HEALTH_PORT_SETTINGS, healthEndpointOf, statsEveryMsOf } from '../../shared/health/health-settings.js';
import { startHealthServer } from '../../shared/health/health-server.js';
import { relayHealth } from '../../shared/relay/relay-health.js';
import { configOf, globalOptions } from '../cli/options.js';

const env = process.env;
const argv = yargs(hideBin(process.argv))
  .options({
    ...globalOptions,
    every: { type: 'number', default: Number(env.OUTBOX_RELAY_EVERY_MS ?? 1000), describe: 'scheduler interval, ms [env OUTBOX_RELAY_EVERY_MS]' },
    slice: { type: 'number', default: Number(env.OUTBOX_RELAY_SLICE_MS ?? 1500), describe: 'how long one job relays, ms [env OUTBOX_RELAY_SLICE_MS]' },
    poll: { type: 'number', default: Number(env.OUTBOX_RELAY_POLL_MS ?? 5), describe: 'pause when nothing is PENDING, ms [env OUTBOX_RELAY_POLL_MS]' },
    'batch-size': { type: 'number', default: Number(env.OUTBOX_RELAY_BATCH_SIZE ?? 1000), describe: 'rows per batch [env OUTBOX_RELAY_BATCH_SIZE]' },
    'lock-duration': {
      type: 'number',
      default: Number(env.OUTBOX_RELAY_LOCK_MS ?? 4000),
      describe: 'BullMQ lock of a relay job, ms; app.db waits are capped at a quarter of it [env OUTBOX_RELAY_LOCK_MS]',
    },
    'prune-older-than': { type: 'string', default: env.OUTBOX_PRUNE_OLDER_THAN, describe: 'prune PUBLISHED rows older than this, e.g. 7d; off when unset [env OUTBOX_PRUNE_OLDER_THAN]' },
    'prune-every': { type: 'string', default: env.OUTBOX_PRUNE_EVERY ?? '1h', describe: 'how often to prune [env OUTBOX_PRUNE_EVERY]' },
  })
  .strict()
  .parseSync();

runApp('outbox-relay', async (log, signal) => {
  const config = configOf(argv);
  const pruneOlderThan = argv['prune-older-than'];
  const pruneSchedule = pruneOlderThan
    ? { olderThanMs: parseDuration(pruneOlderThan, '--prune-older-than'), everyMs: parseDuration(argv['prune-every'], '--prune-every') }
    : undefined;
  const healthEndpoint = healthEndpointOf('relay');
  const statsEveryMs = statsEveryMsOf();
  const detach = attachApp(config.dir, 'outbox-relay');
  // Without a valid app.db it waits (relay passes do nothing) until `outbox init` made one.
  const database = watchDatabase(config.dir, { log, app: 'relay', stopped: 'not relaying' });
  const redis = await connectUntilReady(config.redisUrl, { name: 'outbox-relay', log, signal, namespace: config.namespace, requireNoEviction: true });
  const worker = await startRelayWorker(database, redis, config.redisUrl, log, {
    everyMs: argv.every,
    sliceMs: argv.slice,
    pollMs: argv.poll,
    batchSize: argv['batch-size'],
    lockDurationMs: argv['lock-duration'],
    statsEveryMs,
  });
  const identity = { app: 'outbox-relay', dir: config.dir, namespace: config.namespace };
  const health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.relay.env, () => relayHealth(identity, database, redis, worker.stats), log);
  const pruner = pruneSchedule ? await startPruneWorker(database, redis, config.redisUrl, log, pruneSchedule) : undefined;
  log.info('relay started', { redis: config.redisUrl, db: `${config.dir}/app.db`, everyMs: argv.every, sliceMs: argv.slice, lockDurationMs: argv['lock-duration'], pruneOlderThan: pruneOlderThan ?? 'off' });
  return async () => {
    await health.close();
    await pruner?.close();
    await worker.close();
    await closeRedis(redis);
    database.close();
    detach();
  };
});
