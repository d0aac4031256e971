import type { Logger } from '../outbox/logger.js';

export interface ShutdownOptions {
  /**
   * How long `close` may take before the process exits anyway. Default 4000 ms: below the
   * `kill_timeout` of 5000 ms in ecosystem.config.cjs, after which pm2 sends SIGKILL.
   */
  deadlineMs?: number;
  log: Logger;
}

export const DEFAULT_SHUTDOWN_DEADLINE_MS = 4000;

/**
 * SIGINT/SIGTERM (what pm2 sends) run `close` once, within a deadline; a second signal exits at
 * once. An uncaught error is logged and closes the same way, with exit code 1.
 */
export function closeOnSignals(close: () => Promise<void>, { deadlineMs = DEFAULT_SHUTDOWN_DEADLINE_MS, log }: ShutdownOptions): void {
  let closing = false;

  async function shutdown(reason: string, exitCode: number): Promise<void> {
    if (closing) {
      log.warn('second signal: exiting now', { reason });
      process.exit(exitCode || 130);
    }
    closing = true;
    log.info('shutting down', { reason, deadlineMs });
    const timer = setTimeout(() => {
      log.error('shutdown deadline passed: exiting with work unfinished', { deadlineMs });
      process.exit(1);
    }, deadlineMs);
    timer.unref();
    try {
      await close();
      log.info('stopped', { reason });
    } catch (error) {
      log.error('error while shutting down', { error });
      exitCode = 1;
    }
    process.exit(exitCode);
  }

  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => void shutdown(signal, 0));
  process.on('uncaughtException', (error) => {
    log.error('uncaught exception', { error, stack: error.stack });
    void shutdown('uncaughtException', 1);
  });
  process.on('unhandledRejection', (error) => {
    log.error('unhandled rejection', { error, stack: (error as Error)?.stack });
    void shutdown('unhandledRejection', 1);
  });
}
