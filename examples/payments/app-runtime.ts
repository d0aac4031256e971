// What the payments apps share: their settings from the environment (a bad one refused in one line,
// exit 78 = EX_CONFIG, which the ecosystem's stop_exit_codes keeps pm2 from restarting), JSON log
// lines, and a graceful stop on SIGINT/SIGTERM. Only the package's public API: this is what a
// service of your own would write.
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { StartOptions } from 'outbox';

/** Exit code of a refused setting: pm2 leaves the app stopped (stop_exit_codes: [78]). */
export const EXIT_CONFIG = 78;

type Logger = StartOptions['log'];
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
type Level = (typeof LEVELS)[number];

/** A setting the app cannot run with: one line, exit 78. */
export class SettingError extends Error {}

/** What to do about a ledger that is missing (or not one init-ledger.js made): one line's tail. */
export const missingLedgerAdvice = (path: string) =>
  `the consumer never creates it; the first time, run "node dist/examples/payments/init-ledger.js ${path}"; ` +
  `if it was lost or replaced, stop the consumers, rebuild it from the store with "outbox verify --repair --dir <PAYMENTS_DIR> --namespace payments --consumer-db ${path}", then start them`;

/** JSON lines on stdout (pm2 writes them to the app's log file), at `level` and above. */
export function jsonLogger(app: string, level: Level = 'info'): Logger {
  const min = LEVELS.indexOf(level);
  const method = (name: Level) => (msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS.indexOf(name) < min) return;
    const clean = Object.fromEntries(Object.entries(fields ?? {}).map(([k, v]) => [k, v instanceof Error ? v.message : v]));
    process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level: name, app, msg, ...clean })}\n`);
  };
  return { trace: method('trace'), debug: method('debug'), info: method('info'), warn: method('warn'), error: method('error'), fatal: method('fatal'), level };
}

/** Reads the environment: each getter throws a SettingError naming the variable and what it takes. */
export function settingsOf(env: NodeJS.ProcessEnv = process.env) {
  const raw = (name: string) => (env[name] === undefined || env[name] === '' ? undefined : env[name]);
  return {
    dir: () => resolve(raw('OUTBOX_DIR') ?? join(homedir(), 'outbox-payments')),
    redisUrl(): string {
      const url = raw('REDIS_URL');
      if (!url) throw new SettingError('REDIS_URL is not set: point it at your Redis, e.g. redis://127.0.0.1:6379');
      if (!/^rediss?:\/\/[^\s]+$/.test(url)) throw new SettingError('REDIS_URL must be a redis:// or rediss:// URL');
      return url;
    },
    namespace(): string {
      const namespace = raw('OUTBOX_NAMESPACE') ?? '';
      if (namespace !== '' && !/^[A-Za-z0-9._-]{1,64}$/.test(namespace)) throw new SettingError(`OUTBOX_NAMESPACE must be 1-64 letters, digits, ".", "_" or "-", got ${JSON.stringify(namespace)}`);
      return namespace;
    },
    /** A whole number from `min` to `max`. */
    integer(name: string, fallback: number, min: number, max: number): number {
      const text = raw(name);
      if (text === undefined) return fallback;
      const value = Number(text);
      if (!/^\d+$/.test(text.trim()) || value < min || value > max) throw new SettingError(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`);
      return value;
    },
    /** A number from `min` to `max`. */
    number(name: string, fallback: number, min: number, max: number): number {
      const text = raw(name);
      if (text === undefined) return fallback;
      const value = Number(text);
      if (text.trim() === '' || !Number.isFinite(value) || value < min || value > max) throw new SettingError(`${name} must be a number from ${min} to ${max}, got ${JSON.stringify(text)}`);
      return value;
    },
    text: (name: string, fallback: string) => raw(name) ?? fallback,
    logLevel(): Level {
      const level = (raw('OUTBOX_LOG_LEVEL') ?? 'info').toLowerCase();
      if (!(LEVELS as readonly string[]).includes(level)) throw new SettingError(`OUTBOX_LOG_LEVEL must be one of ${LEVELS.join(', ')}, got ${JSON.stringify(level)}`);
      return level as Level;
    },
  };
}

/** Whether `error` is one a restart would meet again: a refused setting (ours, or the library's ConfigError / RedisSettingsError). */
function isConfigError(error: unknown): boolean {
  return error instanceof SettingError || (error instanceof Error && ['ConfigError', 'RedisSettingsError'].includes(error.name));
}

/**
 * Runs an app: `start` reads its settings and starts it, resolving its stop function. A refused
 * setting is one line on stderr and exit 78; any other failed start one line and exit 1 (pm2
 * restarts it). SIGINT/SIGTERM stop it within 4 s (below the ecosystem's kill_timeout of 5 s); a
 * second signal exits at once.
 */
export function runPaymentsApp(app: string, start: (log: Logger) => Promise<() => Promise<void>>): void {
  // Private files (ledger, payments database), like the project's apps.
  process.umask(0o077);
  let log: Logger;
  try {
    log = jsonLogger(app, settingsOf().logLevel());
  } catch (error) {
    process.stderr.write(`${app}: ${(error as Error).message}\n`);
    process.exit(EXIT_CONFIG);
  }
  let stop: (() => Promise<void>) | undefined;
  let stopping = false;
  const started = start(log).then(
    (stopApp) => {
      stop = stopApp;
    },
    (error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      if (isConfigError(error)) {
        process.stderr.write(`${app}: ${message}\n`);
        process.exit(EXIT_CONFIG);
      }
      if (stopping) process.exit(0);
      process.stderr.write(`${app}: cannot start: ${message}\n`);
      process.exit(1);
    },
  );
  const shutdown = async (signal: string) => {
    if (stopping) process.exit(130);
    stopping = true;
    log.info('stopping', { signal });
    setTimeout(() => {
      log.error('stop took longer than 4 s: exiting with work unfinished');
      process.exit(1);
    }, 4000).unref();
    try {
      await started;
      await stop?.();
      log.info('stopped');
      process.exit(0);
    } catch (error) {
      log.error('error while stopping', { error });
      process.exit(1);
    }
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => void shutdown(signal));
}
