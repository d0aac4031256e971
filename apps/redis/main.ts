import { managedRedisSettings } from '../../shared/config/redis-config.js';
import { managedRedisDir, MANAGED_SETTINGS, portOpen, spawnManagedRedis } from '../../shared/local/managed-redis.js';
import { createLogger } from '../../shared/logger.js';
import { appLogger, loadAppConfig } from '../../shared/run-app.js';

/**
 * outbox-redis: the Redis that ecosystem.config.cjs runs when REDIS_URL is not set. It starts the
 * managed redis-server (shared/local/managed-redis.ts: append-only file under <data dir>/redis,
 * fsynced every second, never evicting, the generated password of <data dir>/redis/password)
 * unless something already listens on the port, in which case the apps use that one and this
 * process only waits for pm2 to stop it.
 */
// A bad OUTBOX_REDIS_PORT (or OUTBOX_LOG_LEVEL) is refused like the other apps' settings: one line, exit 78, recorded for `outbox status`.
const { config } = loadAppConfig('outbox-redis', managedRedisSettings, createLogger('outbox-redis'));
const { port, dir } = config;
const log = appLogger('outbox-redis', config.logLevel);

function idle(reason: string): void {
  const timer = setInterval(() => {}, 1 << 30);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      clearInterval(timer);
      process.exit(0);
    });
  }
  // Announced only once the handlers are in place: a SIGTERM that follows the line at once must
  // find them, or it kills the process (no exit code) instead of stopping it with 0.
  log.info(reason, { port });
}

if (await portOpen(port)) {
  idle(`something already listens on 127.0.0.1:${port}: the apps use it, no redis-server started`);
} else {
  const server = spawnManagedRedis(dir, port, { daemonize: false });
  server.once('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') {
      idle('redis-server is not installed: apt-get install redis-server, or set REDIS_URL to a running Redis');
    } else {
      log.error('cannot start redis-server', { error });
      process.exit(1);
    }
  });
  server.once('spawn', () => log.info('redis-server started', { port, dataDir: managedRedisDir(dir), ...MANAGED_SETTINGS }));
  server.once('exit', (code, signal) => {
    log.info('redis-server exited', { code, signal });
    process.exit(code ?? 1);
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.kill('SIGTERM'));
}
