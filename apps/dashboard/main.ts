import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../../shared/outbox/errors/config-error.js';
import { redactUrl } from '../../shared/outbox/config.js';
import { closePartitions, connectTargetPartitions, connectTargetUntilReady } from '../../shared/outbox/redis/connect-partitions.js';
import type { Partitions } from '../../shared/outbox/redis/partitions.js';
import { watchDatabase } from '../../shared/outbox/store/live-database.js';
import { dashboardSettings } from '../../shared/runtime/config/dashboard-config.js';
import { dashboardHandler } from '../../shared/runtime/dashboard/dashboard-server.js';
import { pgStore, sqliteStore } from '../../shared/runtime/dashboard/dashboard-store.js';
import { startSampler } from '../../shared/runtime/dashboard/sampler.js';
import { loadStaticFiles } from '../../shared/runtime/dashboard/static-files.js';
import { ensureToken, tokenPath } from '../../shared/runtime/dashboard/token.js';
import { reachableHost } from '../../shared/runtime/health/health-settings.js';
import { runApp } from '../../shared/runtime/run-app.js';

/** Why the dashboard cannot listen where it was told to, as a config error (pm2 does not restart it into the same refusal). */
function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const where = `${host}:${port}`;
  const fix = 'set OUTBOX_DASHBOARD_PORT (--port) or OUTBOX_DASHBOARD_HOST (--host) to another one';
  if (error.code === 'EADDRINUSE') return new ConfigError(`cannot listen on ${where}: the port is in use (EADDRINUSE): stop what listens there, or ${fix}`);
  if (error.code === 'EACCES') return new ConfigError(`cannot listen on ${where}: not allowed (EACCES; ports below 1024 need privileges): ${fix}`);
  if (error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND') return new ConfigError(`cannot listen on ${where}: no such local address (${error.code}): ${fix}`);
  return error;
}

runApp('outbox-dashboard', dashboardSettings, async (config, log, signal) => {
  const { port, host, dir, namespace } = config;
  const files = loadStaticFiles(fileURLToPath(new URL('./page/', import.meta.url)));
  const token = ensureToken(dir);
  // Listening first: a port that is taken refuses the start before app.db or Redis is touched.
  const server: Server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) => reject(listenError(error, host, port)));
    server.listen(port, host, resolve);
  });
  // It only reads the store: app.db (any service's database with the library's tables, followed
  // when replaced), or the PostgreSQL store, whose being down is shown on the page.
  const store =
    config.databaseUrl === ''
      ? sqliteStore(watchDatabase(dir, { log, app: 'dashboard', stopped: 'showing no app.db numbers', outboxOnly: true }))
      : await pgStore(config.databaseUrl, dir);
  let queues: Partitions | undefined;
  const sampler = startSampler({ dir, namespace, store, queues: () => queues, log });
  server.on('request', dashboardHandler({ files, state: sampler.state, queues: () => queues, token, tokenFile: tokenPath(dir), host, log }));
  const url = `http://${reachableHost(host)}:${(server.address() as AddressInfo).port}/`;
  const where = config.databaseUrl === '' ? { db: `${dir}/app.db` } : { database: redactUrl(config.databaseUrl) };
  log.info('dashboard listening', { url, tokenFile: tokenPath(dir), ...where, ...(config.partitions > 1 || config.redisCluster ? { partitions: config.partitions } : {}) });
  // Redis may come later: the page shows what the store says meanwhile. One connection per partition (one in all without partitions).
  queues = await connectTargetPartitions(config, (options) => connectTargetUntilReady(config, { name: 'outbox-dashboard', log, signal, ...options }));

  return async () => {
    await sampler.close();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
    if (queues) await closePartitions(queues);
    await store.close();
  };
});
