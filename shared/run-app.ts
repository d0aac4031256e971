import { OutboxError } from './errors/outbox-error.js';
import { RedisSettingsError } from './errors/redis-settings-error.js';
import { keepFilesPrivate } from './local/private-files.js';
import { createLogger, type Logger } from './logger.js';
import { closeOnSignals } from './shutdown.js';

/**
 * Exit code of an app refused by a configuration that a restart cannot fix (sysexits' EX_CONFIG):
 * ecosystem.config.cjs lists it in `stop_exit_codes`, so pm2 leaves the app stopped.
 */
export const EXIT_CONFIG = 78;

/** Starts what an app runs; resolves the function that closes it all. */
export type AppStart = (log: Logger, signal: AbortSignal) => Promise<() => Promise<void>>;

/**
 * Runs a long-lived app: files it creates private (0600 / 0700), JSON logs, SIGINT/SIGTERM handled from the first instant (also while it
 * is still connecting), a failed start logged as one line with exit code 1 (pm2 restarts it), or
 * `EXIT_CONFIG` when Redis's settings are refused (pm2 does not).
 */
export function runApp(app: string, start: AppStart): void {
  keepFilesPrivate();
  const log = createLogger(app);
  const stopping = new AbortController();
  let close: (() => Promise<void>) | undefined;
  const started = start(log, stopping.signal).then(
    (closeApp) => {
      close = closeApp;
    },
    (error: Error) => {
      if (stopping.signal.aborted) return;
      log.error(error instanceof OutboxError ? error.message : 'cannot start', { error, stack: error instanceof OutboxError ? undefined : error.stack });
      process.exit(error instanceof RedisSettingsError ? EXIT_CONFIG : 1);
    },
  );
  closeOnSignals(
    async () => {
      stopping.abort();
      await started;
      await close?.();
    },
    { log },
  );
}
