import { relaySettings } from '../../shared/runtime/config/relay-config.js';
import { watchDatabase } from '../../shared/outbox/store/live-database.js';
import { attachApp } from '../../shared/runtime/attached-apps.js';
import { closeRedis, connectUntilReady } from '../../shared/outbox/redis/connect.js';
import { startPruneWorker } from '../../shared/operations/prune/prune-worker.js';
import { startRelayWorker } from '../../shared/outbox/relay/relay-worker.js';
import { runApp } from '../../shared/runtime/run-app.js';
import { healthEndpointOf, HEALTH_PORT_SETTINGS } from '../../shared/runtime/health/health-settings.js';
import { startHealthServer } from '../../shared/runtime/health/health-server.js';
import { relayHealth } from '../../shared/runtime/health/relay-health.js';
import { appMetrics } from '../../shared/runtime/metrics/app-metrics.js';

runApp('outbox-relay', relaySettings, async (config, log, signal) => {
  const detach = attachApp(config.dir, 'outbox-relay');
  // Without a valid app.db it waits (relay passes do nothing) until `outbox init` (or a service's
  // createOutbox) made one. Any service's database with the library's tables: it carries any events.
  const database = watchDatabase(config.dir, { log, app: 'relay', stopped: 'not relaying', outboxOnly: true });
  const redis = await connectUntilReady(config.redisUrl, { name: 'outbox-relay', log, signal, namespace: config.namespace, requireNoEviction: true });
  const healthEndpoint = healthEndpointOf('relay', config.healthPort, config.healthHost);
  // /metrics is served next to /healthz, on the same listener: none when that is off.
  const metrics = healthEndpoint === null ? undefined : await appMetrics('outbox-relay');
  metrics?.watchStore(() => (database.check() ? database.current().db : null));
  metrics?.watchQueue(redis);
  const worker = await startRelayWorker(database, redis, config.redisUrl, log, {
    everyMs: config.everyMs,
    sliceMs: config.sliceMs,
    pollMs: config.pollMs,
    batchSize: config.batchSize,
    lockDurationMs: config.lockDurationMs,
    statsEveryMs: config.statsEveryMs,
    metrics,
  });
  const identity = { app: 'outbox-relay', dir: config.dir, namespace: config.namespace };
  const health = await startHealthServer(healthEndpoint, HEALTH_PORT_SETTINGS.relay.env, () => relayHealth(identity, database, redis, worker.stats), log, metrics);
  const pruneOlderThanMs = config.pruneOlderThanMs;
  const pruner = pruneOlderThanMs === undefined ? undefined : await startPruneWorker(database, redis, config.redisUrl, log, { olderThanMs: pruneOlderThanMs, everyMs: config.pruneEveryMs });
  log.info('relay started', {
    redis: config.redisUrl,
    db: `${config.dir}/app.db`,
    everyMs: config.everyMs,
    sliceMs: config.sliceMs,
    pollMs: config.pollMs,
    batchSize: config.batchSize,
    lockDurationMs: config.lockDurationMs,
    pruneOlderThanMs: pruneOlderThanMs ?? 'off',
  });
  return async () => {
    await health.close();
    await pruner?.close();
    await worker.close();
    await closeRedis(redis);
    database.close();
    detach();
  };
});
