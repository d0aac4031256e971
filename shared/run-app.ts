import { OutboxError } from './errors/outbox-error.js';
import { createLogger, type Logger } from './logger.js';
import { closeOnSignals } from './shutdown.js';

/** Starts what an app runs; resolves the function that closes it all. */
export type AppStart = (log: Logger, signal: AbortSignal) => Promise<() => Promise<void>>;

/**
 * Runs a long-lived app: JSON logs, SIGINT/SIGTERM handled from the first instant (also while it
 * is still connecting), a failed start logged as one line with exit code 1 (pm2 restarts it).
 */
export function runApp(app: string, start: AppStart): void {
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
      process.exit(1);
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
