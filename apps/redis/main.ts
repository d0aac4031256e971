import { managedRedisSettings } from '../../shared/runtime/config/redis-config.js';
import { forgetManagedOwner, managedRedisDir, MANAGED_SETTINGS, portOpen, spawnManagedRedis } from '../../shared/tooling/local/managed-redis.js';
import { clearRefusal } from '../../shared/runtime/refusals.js';
import { createLogger } from '../../shared/outbox/logger.js';
import { appLogger, loadAppConfig } from '../../shared/runtime/run-app.js';

/**
 * outbox-redis: the Redis that ecosystem.config.cjs runs when REDIS_URL is not set. It starts the
 * managed redis-server (shared/tooling/local/managed-redis.ts: append-only file under <data dir>/redis,
 * fsynced every second, never evicting, the generated password of <data dir>/redis/password)
 * unless something already listens on the port, in which case the apps use that one and this
 * process only waits for pm2 to stop it. Once it runs (either way), an earlier refusal is forgotten.
 *
 * Stopped (SIGINT, SIGTERM), it keeps redis-server up for STOP_GRACE_MS before it sends it SIGTERM:
 * `pm2 stop ecosystem.config.cjs` signals every app at once, and the relay and the consumer need
 * Redis to close (well under a second); without the grace they would lose it mid-shutdown and run
 * into their 4 s deadline. pm2 sends SIGKILL after kill_timeout (5 s): the grace leaves redis-server
 * over 3 s for its own shutdown. ecosystem.config.cjs sets `treekill: false` for this app, so that
 * pm2's signal reaches this process only, not redis-server too.
 */
// A bad OUTBOX_REDIS_PORT (or OUTBOX_LOG_LEVEL) is refused like the other apps' settings: one line, exit 78, recorded for `outbox status`.
const { config, dir: refusalDir } = loadAppConfig('outbox-redis', managedRedisSettings, createLogger('outbox-redis'));
const { port, dir } = config;
const log = appLogger('outbox-redis', config);

/** How long redis-server outlives a stop signal: the other apps close meanwhile. */
const STOP_GRACE_MS = 1500;

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
  clearRefusal(refusalDir, 'outbox-redis');
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
  server.once('spawn', () => {
    clearRefusal(refusalDir, 'outbox-redis');
    log.info('redis-server started', { port, dataDir: managedRedisDir(dir), ...MANAGED_SETTINGS });
  });
  server.once('exit', (code, signal) => {
    log.info('redis-server exited', { code, signal });
    forgetManagedOwner(dir, port);
    process.exit(code ?? 1);
  });
  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      // No pid: redis-server could not be started (idle() stops the process).
      if (stopping || server.pid === undefined) return;
      stopping = true;
      log.info(`stopping redis-server in ${STOP_GRACE_MS / 1000} s: the other apps close first`, { signal, graceMs: STOP_GRACE_MS });
      setTimeout(() => server.kill('SIGTERM'), STOP_GRACE_MS);
    });
  }
}
