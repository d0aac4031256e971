import { resolve } from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { defaultDir } from '../outbox/config.js';
import { count, custom, flagOptions, readSettings, size } from './config/settings.js';
import type { Argv, Settings, ValuesOf } from './config/settings.js';
import { ConfigError } from '../outbox/errors/config-error.js';
import { InvalidInputError } from '../outbox/errors/invalid-input-error.js';
import { OutboxError } from '../outbox/errors/outbox-error.js';
import { RedisSettingsError } from '../outbox/errors/redis-settings-error.js';
import { RotatingLogFile } from './log-file.js';
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
    range: `one of ${LOG_LEVELS.join(', ')} (any case)`,
    describe: `lowest level logged: ${LOG_LEVELS.join(', ')}`,
    parse: parseLogLevel,
  }),
  /** ecosystem.config.cjs sets it to pm2's out file of the app (`<OUTBOX_LOG_DIR>/<app>.log`). */
  logFile: custom<string | undefined>({
    flag: 'log-file',
    env: 'OUTBOX_LOG_FILE',
    default: '',
    defaultText: 'none: stdout',
    range: 'a path',
    describe: 'write the log lines to this file, rotated by size (ecosystem.config.cjs sets it for each app)',
    parse: (raw) => (raw.trim() === '' ? undefined : resolve(raw.trim())),
  }),
  logMaxSize: size({
    flag: 'log-max-size',
    env: 'OUTBOX_LOG_MAX_SIZE',
    default: '10MB',
    min: 1024,
    max: 1024 ** 4,
    describe: 'with a log file: start a new file before a line would take the current one past this size',
  }),
  logRetain: count({
    flag: 'log-retain',
    env: 'OUTBOX_LOG_RETAIN',
    default: '5',
    min: 0,
    max: 1000,
    describe: 'with a log file: how many rotated files (<file>.1 newest, …) to keep besides the current one',
  }),
};

/** The log settings' values, as `loadAppConfig` gives them. */
export type LogConfig = ValuesOf<typeof logSettings>;

/**
 * The logger an app writes with once its settings are read: at `logLevel` (OUTBOX_LOG_LEVEL), and
 * carrying what libraries print on their own (`routeStrayOutput`), so that the app writes JSON
 * lines only. With a log file (under pm2) the lines go to it, rotated (`RotatingLogFile`), else to stdout.
 */
export function appLogger(app: string, settings: LogConfig | LogLevel): Logger {
  // A level alone (a fixture, a tool): stdout at that level.
  const config: LogConfig =
    typeof settings === 'string' ? { ...readSettings(logSettings, {}, {}), logLevel: settings } : settings;
  const write = config.logFile === undefined ? undefined : fileWriter(config);
  const log = createLogger(app, write, { level: config.logLevel });
  routeStrayOutput(log);
  return log;
}

/**
 * Writes each line to the rotating file. pm2 has the same path as the app's out file, so
 * `pm2 logs <app>` prints its last lines; it follows new ones from its bus, which gets each line
 * as a `log:out` message (stdout would have pm2 append it to the file a second time).
 */
function fileWriter(config: LogConfig): (line: string) => void {
  const file = new RotatingLogFile({ path: config.logFile!, maxBytes: config.logMaxSize, retain: config.logRetain });
  const underPm2 = process.env.pm_id !== undefined && typeof process.send === 'function';
  return (line) => {
    try {
      file.write(line);
    } catch {
      // A file that cannot be written (disk full, permissions): the line goes to pm2's out file instead.
      process.stdout.write(line);
      return;
    }
    if (underPm2 && process.connected) process.send!({ type: 'log:out', data: line }, undefined, {}, () => {});
  };
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
  const log = appLogger(app, config);
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
): { config: ValuesOf<S> & LogConfig; dir: string } {
  const all = { ...settings, ...logSettings };
  let argv: Argv = {};
  try {
    argv = parseArgv(app, all, args);
    return { config: readSettings(all, argv, env) as ValuesOf<S> & LogConfig, dir: dataDirOf(argv, env) };
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
  // Under pm2 a restart, even with --update-env, can keep the environment the app was started
  // with, bad setting included: only a delete and a new start take the shell's.
  const pm2 = process.env.pm_id === undefined ? '' : `; once it is fixed: npx pm2 delete ${app}, then npx pm2 start ecosystem.config.cjs (a restart keeps the old environment)`;
  const refusal = { app, at: new Date().toISOString(), exitCode: EXIT_CONFIG, message: `${error.message}${pm2}` };
  let notRecorded: string | undefined;
  try {
    recordRefusal(dir, refusal);
  } catch (writeError) {
    notRecorded = (writeError as Error).message;
  }
  log.error(refusal.message, { exitCode: EXIT_CONFIG, ...(notRecorded ? { refusalNotRecorded: notRecorded } : {}) });
  process.exit(EXIT_CONFIG);
}
