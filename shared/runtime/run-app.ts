import { resolve } from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { defaultDir } from '../outbox/config.js';
import { custom, flagOptions, readSettings, type Argv, type Settings, type ValuesOf } from './config/settings.js';
import { ConfigError } from '../outbox/errors/config-error.js';
import { InvalidInputError } from '../outbox/errors/invalid-input-error.js';
import { OutboxError } from '../outbox/errors/outbox-error.js';
import { RedisSettingsError } from '../outbox/errors/redis-settings-error.js';
import { keepFilesPrivate } from './private-files.js';
import { clearRefusal, recordRefusal } from './refusals.js';
import { createLogger, DEFAULT_LOG_LEVEL, LOG_LEVELS, parseLogLevel, type Logger, type LogLevel } from '../outbox/logger.js';
import { closeOnSignals } from './shutdown.js';
import { routeStrayOutput } from './stray-output.js';

/**
 * Exit code of an app refused by a configuration that a restart cannot fix (sysexits' EX_CONFIG):
 * ecosystem.config.cjs lists it in `stop_exit_codes`, so pm2 leaves the app stopped.
 */
export const EXIT_CONFIG = 78;

/** What every app reads besides its own settings. */
export const logSettings = {
  /** The lowest level written (`shared/outbox/logger.ts`). Default info. */
  logLevel: custom({
    env: 'OUTBOX_LOG_LEVEL',
    default: DEFAULT_LOG_LEVEL,
    describe: `lowest level logged: ${LOG_LEVELS.join(', ')}`,
    parse: parseLogLevel,
  }),
};

/**
 * The logger an app writes with once its settings are read: at `level` (OUTBOX_LOG_LEVEL), and
 * carrying what libraries print on their own (`routeStrayOutput`), so that the app writes JSON
 * lines only.
 */
export function appLogger(app: string, level: LogLevel): Logger {
  const log = createLogger(app, undefined, { level });
  routeStrayOutput(log);
  return log;
}

/** Starts what an app runs with its checked settings; resolves the function that closes it all. */
export type AppStart<C> = (config: C, log: Logger, signal: AbortSignal) => Promise<() => Promise<void>>;

/** The command line as yargs reads it against `settings`' flags; an unknown flag or a flag without its value is a config error. */
function parseArgv(app: string, settings: Settings, args: string[]): Argv {
  return yargs(args)
    .scriptName(app)
    .usage('$0 [options]: settings come from these flags, else from the environment variables named, else the defaults')
    .options(flagOptions(settings))
    .strict()
    .version(false)
    .help()
    .wrap(null)
    .fail((message, error) => {
      throw error ?? new InvalidInputError(`${message} (see --help)`);
    })
    .parseSync() as Argv;
}

/**
 * Runs a long-lived app: its settings read from the flags and the environment and checked before
 * anything connects or listens, JSON logs, SIGINT/SIGTERM handled from the first instant (also
 * while it is still connecting). A setting it cannot run with (a bad value, a retired variable, a
 * taken port, a Redis that may evict keys) is refused: one JSON line, the refusal recorded in
 * `<dir>/refused/<app>.json` for `outbox status`, exit code `EXIT_CONFIG`, which pm2 does not
 * restart. Any other failed start is one line and exit code 1 (pm2 restarts it). Once the app
 * started, an earlier refusal is forgotten.
 */
export function runApp<S extends Settings>(app: string, settings: S, start: AppStart<ValuesOf<S>>, args = hideBin(process.argv), env = process.env): void {
  keepFilesPrivate();
  // A refusal is written before OUTBOX_LOG_LEVEL is known: at the default level.
  const { config, dir } = loadAppConfig(app, settings, createLogger(app), args, env);
  const log = appLogger(app, config.logLevel);
  const stopping = new AbortController();
  let close: (() => Promise<void>) | undefined;
  let started: Promise<void> = Promise.resolve();
  // The handlers go in before `start` runs: a start logs and connects synchronously up to its first
  // await, and a SIGTERM in that window would otherwise meet the default action (killed, no exit 0).
  closeOnSignals(
    async () => {
      stopping.abort();
      await started;
      await close?.();
    },
    { log },
  );
  started = start(config, log, stopping.signal).then(
    (closeApp) => {
      close = closeApp;
      clearRefusal(dir, app);
    },
    (error: Error) => {
      if (stopping.signal.aborted) return;
      if (error instanceof ConfigError || error instanceof RedisSettingsError) refuse(app, dir, log, error);
      log.error(error instanceof OutboxError ? error.message : 'cannot start', { error, stack: error instanceof OutboxError ? undefined : error.stack });
      process.exit(1);
    },
  );
}

/**
 * An app's settings from `args` and `env`, checked; a bad one is refused (see `runApp`). `dir` is
 * where the refusal was or would be recorded.
 */
export function loadAppConfig<S extends Settings>(
  app: string,
  settings: S,
  log: Logger,
  args = hideBin(process.argv),
  env = process.env,
): { config: ValuesOf<S> & { logLevel: LogLevel }; dir: string } {
  const all = { ...settings, ...logSettings };
  let argv: Argv = {};
  try {
    argv = parseArgv(app, all, args);
    return { config: readSettings(all, argv, env) as ValuesOf<S> & { logLevel: LogLevel }, dir: dataDirOf(argv, env) };
  } catch (error) {
    if (!(error instanceof OutboxError)) throw error;
    refuse(app, dataDirOf(argv, env), log, error);
  }
}

/** The data dir where the refusal goes, even when the settings did not parse: `--dir`, else OUTBOX_DIR, else ~/outbox. */
function dataDirOf(argv: Argv, env: NodeJS.ProcessEnv): string {
  return resolve(typeof argv.dir === 'string' && argv.dir !== '' ? argv.dir : defaultDir(env));
}

/** One JSON line, the refusal recorded (or why it could not be, in the same line), exit `EXIT_CONFIG`. */
export function refuse(app: string, dir: string, log: Logger, error: OutboxError): never {
  const refusal = { app, at: new Date().toISOString(), exitCode: EXIT_CONFIG, message: error.message };
  let notRecorded: string | undefined;
  try {
    recordRefusal(dir, refusal);
  } catch (writeError) {
    notRecorded = (writeError as Error).message;
  }
  log.error(error.message, { exitCode: EXIT_CONFIG, ...(notRecorded ? { refusalNotRecorded: notRecorded } : {}) });
  process.exit(EXIT_CONFIG);
}
