import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase } from '../../shared/db/open-database.js';
import { ensureDatabase } from '../../shared/init-stores.js';
import { closeRedis, connectUntilReady } from '../../shared/redis/connect.js';
import { startRelayWorker } from '../../shared/relay/relay-worker.js';
import { runApp } from '../../shared/run-app.js';
import { configOf, globalOptions } from '../cli/options.js';

const env = process.env;
const argv = yargs(hideBin(process.argv))
  .options({
    ...globalOptions,
    every: { type: 'number', default: Number(env.OUTBOX_RELAY_EVERY_MS ?? 1000), describe: 'scheduler interval, ms [env OUTBOX_RELAY_EVERY_MS]' },
    slice: { type: 'number', default: Number(env.OUTBOX_RELAY_SLICE_MS ?? 1000), describe: 'how long one job relays, ms [env OUTBOX_RELAY_SLICE_MS]' },
    poll: { type: 'number', default: Number(env.OUTBOX_RELAY_POLL_MS ?? 5), describe: 'pause when nothing is PENDING, ms [env OUTBOX_RELAY_POLL_MS]' },
    'batch-size': { type: 'number', default: Number(env.OUTBOX_RELAY_BATCH_SIZE ?? 1000), describe: 'rows per batch [env OUTBOX_RELAY_BATCH_SIZE]' },
  })
  .strict()
  .parseSync();

runApp('outbox-relay', async (log, signal) => {
  const config = configOf(argv);
  ensureDatabase(config.dir);
  const db = openDatabase(config.dir);
  const redis = await connectUntilReady(config.redisUrl, { name: 'outbox-relay', log, signal });
  const worker = await startRelayWorker(db, redis, config.redisUrl, log, {
    everyMs: argv.every,
    sliceMs: argv.slice,
    pollMs: argv.poll,
    batchSize: argv['batch-size'],
  });
  log.info('relay started', { redis: config.redisUrl, db: `${config.dir}/app.db`, everyMs: argv.every, sliceMs: argv.slice });
  return async () => {
    await worker.close();
    await closeRedis(redis);
    db.close();
  };
});
