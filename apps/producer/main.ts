import { createServer } from 'node:http';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { watchDatabase } from '../../shared/db/live-database.js';
import { attachApp } from '../../shared/local/attached-apps.js';
import { createOrderApi } from '../../shared/producer/http-api.js';
import { createLiveOrderService } from '../../shared/producer/live-order-service.js';
import { producerHealth } from '../../shared/producer/producer-health.js';
import { startTraffic } from '../../shared/producer/traffic.js';
import { runApp } from '../../shared/run-app.js';
import { configOf, globalOptions } from '../cli/options.js';

const env = process.env;
const argv = yargs(hideBin(process.argv))
  .options({
    ...globalOptions,
    port: { type: 'number', default: Number(env.PORT ?? 3000), describe: 'HTTP port [env PORT]' },
    host: { type: 'string', default: env.HOST ?? '127.0.0.1', describe: 'address to bind [env HOST]' },
    rate: { type: 'number', default: Number(env.OUTBOX_RATE ?? 0), describe: 'built-in traffic, operations/s; 0 = off [env OUTBOX_RATE]' },
    duration: { type: 'number', default: Number(env.OUTBOX_DURATION ?? 0), describe: 'traffic duration in s; 0 = until stopped [env OUTBOX_DURATION]' },
    seed: { type: 'number', default: Number(env.OUTBOX_SEED ?? 1), describe: 'traffic random seed [env OUTBOX_SEED]' },
  })
  .strict()
  .parseSync();

runApp('outbox-producer', async (log) => {
  const config = configOf(argv);
  const detach = attachApp(config.dir, 'outbox-producer');
  // Without a valid app.db it still listens, answering 503 until `outbox init` made one.
  const database = watchDatabase(config.dir, { log, app: 'producer', stopped: 'refusing writes' });
  const service = createLiveOrderService(database);
  const health = () => producerHealth({ app: 'outbox-producer', dir: config.dir, namespace: config.namespace }, database);
  const server = createServer(createOrderApi(service, log, { health }));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(argv.port, argv.host, resolve);
  });
  log.info('producer listening', { url: `http://${argv.host}:${argv.port}`, db: `${config.dir}/app.db` });

  const traffic = argv.rate > 0 ? startTraffic(service, { rate: argv.rate, durationMs: argv.duration * 1000, seed: argv.seed }, log) : undefined;
  if (traffic) {
    log.info('traffic started', { rate: argv.rate, durationS: argv.duration, seed: argv.seed });
    void traffic.done.then((stats) => log.info('traffic stopped', { ...stats }));
  }

  return async () => {
    await traffic?.stop();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    database.close();
    detach();
  };
});
