import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { defaultDir } from '../../shared/config.js';
import { createLogger } from '../../shared/logger.js';

/**
 * outbox-redis: the Redis that ecosystem.config.cjs runs when REDIS_URL is not set. It starts
 * `redis-server` (append-only file under <data dir>/redis, fsynced every second; never evicting)
 * unless something already listens on the port, in which case the apps use that one and this
 * process only waits for pm2 to stop it.
 */
const log = createLogger('outbox-redis');
const port = Number(process.env.OUTBOX_REDIS_PORT ?? 6379);
const dataDir = join(defaultDir(), 'redis');

function listening(): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

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

if (await listening()) {
  idle(`something already listens on 127.0.0.1:${port}: the apps use it, no redis-server started`);
} else {
  mkdirSync(dataDir, { recursive: true });
  // Stated explicitly rather than left to redis-server's defaults: outbox's state must survive a
  // restart (AOF, fsynced every second) and must never be evicted.
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dataDir, '--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction', '--save', ''];
  const server = spawn('redis-server', args, { stdio: 'inherit' });
  server.once('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') {
      idle('redis-server is not installed: apt-get install redis-server, or set REDIS_URL to a running Redis');
    } else {
      log.error('cannot start redis-server', { error });
      process.exit(1);
    }
  });
  server.once('spawn', () => log.info('redis-server started', { port, dataDir, appendonly: 'yes', appendfsync: 'everysec', maxmemoryPolicy: 'noeviction' }));
  server.once('exit', (code, signal) => {
    log.info('redis-server exited', { code, signal });
    process.exit(code ?? 1);
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.kill('SIGTERM'));
}
