import { createServer, type Server } from 'node:http';
import { redactUrl } from '../../shared/outbox/config.js';
import { OutboxError } from '../../shared/outbox/errors/outbox-error.js';
import type { Logger } from '../../shared/outbox/logger.js';
import type { ProducerConfig } from '../../shared/runtime/config/producer-config.js';
import { checkPgStore } from '../../shared/runtime/health/checks.js';
import { healthReport } from '../../shared/runtime/health/health-report.js';
import { producerSettings } from '../../shared/runtime/config/producer-config.js';
import { watchDatabase } from '../../shared/outbox/store/live-database.js';
import { ConfigError } from '../../shared/outbox/errors/config-error.js';
import { attachApp } from '../../shared/runtime/attached-apps.js';
import { boundConnections, createOrderApi, type OrderApiService } from '../../shared/lab/producer/http-api.js';
import { createLiveOrderService } from '../../shared/lab/producer/live-order-service.js';
import { producerHealth } from '../../shared/runtime/health/producer-health.js';
import { startTraffic } from '../../shared/lab/producer/traffic.js';
import { runApp } from '../../shared/runtime/run-app.js';
import { appMetrics, sendMetrics } from '../../shared/runtime/metrics/app-metrics.js';

/** Why the producer cannot listen where it was told to, as a config error (pm2 does not restart it into the same refusal); other errors as they are. */
function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const where = `${host}:${port}`;
  const fix = 'set PORT (--port) or HOST (--host) to another one';
  if (error.code === 'EADDRINUSE') return new ConfigError(`cannot listen on ${where}: the port is in use (EADDRINUSE): stop what listens there, or ${fix}`);
  if (error.code === 'EACCES') return new ConfigError(`cannot listen on ${where}: not allowed (EACCES; ports below 1024 need privileges): ${fix}`);
  if (error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND') return new ConfigError(`cannot listen on ${where}: no such local address (${error.code}): ${fix}`);
  return error;
}

runApp('outbox-producer', producerSettings, async (config, log) => {
  const { port, host } = config;
  // Listening first: a port that is taken refuses the start before app.db is touched.
  const server = createServer();
  boundConnections(server, config);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) => reject(listenError(error, host, port)));
    server.listen(port, host, resolve);
  });
  if (config.databaseUrl !== '') return startOnPostgres(config, server, log);
  const detach = attachApp(config.dir, 'outbox-producer');
  // Without a valid app.db it still listens, answering 503 until `outbox init` made one.
  const database = watchDatabase(config.dir, { log, app: 'producer', stopped: 'refusing writes' });
  const service = createLiveOrderService(database);
  const health = () => producerHealth({ app: 'outbox-producer', dir: config.dir }, database);
  // GET /metrics on the API's port: PENDING rows and the oldest one's age, read from app.db when scraped.
  const metrics = await appMetrics('outbox-producer');
  metrics.watchStore(() => (database.check() ? database.current().db : null));
  server.on('request', createOrderApi(service, log, { health, metrics: (res) => sendMetrics(res, metrics, log) }));
  log.info('producer listening', { url: `http://${host}:${port}`, db: `${config.dir}/app.db` });

  const traffic = startConfiguredTraffic(config, service, log);
  return async () => {
    await traffic?.stop();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    database.close();
    detach();
  };
});

/** The built-in traffic (OUTBOX_RATE) on `service`, when asked for. */
function startConfiguredTraffic(config: ProducerConfig, service: OrderApiService, log: Logger) {
  if (config.rate <= 0) return undefined;
  const traffic = startTraffic(service, { rate: config.rate, durationMs: config.durationMs, seed: config.seed }, log);
  log.info('traffic started', { rate: config.rate, durationMs: config.durationMs, seed: config.seed });
  void traffic.done.then((stats) => log.info('traffic stopped', { ...stats }));
  return traffic;
}

/**
 * The order API on the PostgreSQL store (OUTBOX_DATABASE_URL): each write one pg transaction
 * (pg-order-service.ts) on a pool of its own. Health: PostgreSQL answers with the store id. A write
 * that meets PostgreSQL unreachable is a 503.
 */
async function startOnPostgres(config: ProducerConfig, server: Server, log: Logger): Promise<() => Promise<void>> {
  const { openPg, assertPgOutbox } = await import('../../shared/runtime/postgres.js');
  const { createPgOrderService } = await import('../../shared/lab/orders/pg-order-service.js');
  const { pgUnavailable } = await import('../../shared/outbox/postgres/pg-errors.js');
  const { attachPgApp } = await import('../../shared/runtime/pg-attached-apps.js');
  const pool = await openPg(config.databaseUrl, { max: 8, name: 'outbox-producer' });
  await assertPgOutbox(pool);
  const detach = await attachPgApp(config.databaseUrl, 'outbox-producer', log);
  const pg = await createPgOrderService(pool);
  const guarded =
    <A extends unknown[], R>(fn: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> =>
      fn(...args).catch((error) => {
        throw error instanceof OutboxError ? error : pgUnavailable('write the order', error);
      });
  const service = { placeOrder: guarded(pg.placeOrder), changeQty: guarded(pg.changeQty), cancelOrder: guarded(pg.cancelOrder), getOrder: guarded(pg.getOrder) };
  const health = async () => healthReport({ app: 'outbox-producer', dir: config.dir }, { database: await checkPgStore(pool) });
  // GET /metrics: PENDING rows and the oldest one's age, read from PostgreSQL when scraped.
  const metrics = await appMetrics('outbox-producer');
  metrics.watchStore(pool);
  server.on('request', createOrderApi(service, log, { health, metrics: (res) => sendMetrics(res, metrics, log) }));
  log.info('producer listening', { url: `http://${config.host}:${config.port}`, database: redactUrl(config.databaseUrl) });
  const traffic = startConfiguredTraffic(config, service, log);
  return async () => {
    await traffic?.stop();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await pool.end();
    await detach();
  };
}
