import { pino } from 'pino';
import { InvalidInputError } from './errors/invalid-input-error.js';
import { scrubSecrets } from './log-secrets.js';

export type LogFields = Record<string, unknown>;

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const DEFAULT_LOG_LEVEL: LogLevel = 'info';

type LogMethod = (msg: string, fields?: LogFields) => void;

/** What the apps and the library log through. Lines under the logger's level cost one comparison. */
export interface Logger {
  trace: LogMethod;
  debug: LogMethod;
  info: LogMethod;
  warn: LogMethod;
  error: LogMethod;
  fatal: LogMethod;
  readonly level: LogLevel;
}

/**
 * The level named by `raw` (e.g. OUTBOX_LOG_LEVEL), `info` when unset or empty. Anything else is an
 * `InvalidInputError` naming `name`: a configuration error, which an app reports as one line and
 * exit code 78.
 */
export function parseLogLevel(raw: string | undefined, name: string): LogLevel {
  if (raw === undefined || raw.trim() === '') return DEFAULT_LOG_LEVEL;
  const level = raw.trim().toLowerCase();
  if ((LOG_LEVELS as readonly string[]).includes(level)) return level as LogLevel;
  throw new InvalidInputError(`${name} must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(raw)}`);
}

export interface LoggerOptions {
  /** Lines below it are dropped. Default `info`. */
  level?: LogLevel;
}

/** Keys whose values are secrets wherever they appear (ioredis options: password, sentinelPassword). */
const SECRET_KEY = /password|passwd|secret/i;
const isSecret = (key: string, value: unknown) => SECRET_KEY.test(key) && value !== undefined && value !== null && value !== '';
/** Nesting beyond this is summarized: a log line is not a dump. */
const MAX_DEPTH = 6;

/** An error as one line: `code: message` (or the message), secrets scrubbed. */
export function errorLine(error: Error): string {
  const { code } = error as { code?: unknown };
  const line = code !== undefined && code !== null && !String(error.message).startsWith(String(code)) ? `${String(code)}: ${error.message}` : error.message || error.name;
  return scrubSecrets(line.replace(/\s*\n\s*/g, ' '));
}

/**
 * A field value fit for a log line, at any depth: errors as one line, strings without passwords
 * (of URLs, or remembered secrets), the values of `password`-like keys replaced by `***`.
 */
function clean(value: unknown, depth: number, seen: WeakSet<object>): unknown {
  if (typeof value === 'string') return scrubSecrets(value);
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Error) return errorLine(value);
  if (value instanceof Date) return value.toISOString();
  if (value instanceof URL) return scrubSecrets(value.href);
  if (Buffer.isBuffer(value)) return scrubSecrets(value.toString('utf8', 0, Math.min(value.length, 200)));
  if (seen.has(value)) return '[circular]';
  if (depth >= MAX_DEPTH) return Array.isArray(value) ? '[array]' : '[object]';
  seen.add(value);
  if (Array.isArray(value)) return value.map((item) => clean(item, depth + 1, seen));
  const out: LogFields = {};
  for (const [key, item] of Object.entries(value)) out[key] = isSecret(key, item) ? '***' : clean(item, depth + 1, seen);
  return out;
}

/** The object pino writes: `msg`, then the fields cleaned; stacks (`stack`, `<key>Stack` of an error) only with `stacks`. */
function cleanFields(msg: string, fields: LogFields | undefined, stacks: boolean): LogFields {
  // msg is part of the object (not pino's msg argument) so that it comes before the fields.
  const entry: LogFields = { msg: scrubSecrets(msg) };
  if (!fields) return entry;
  const seen = new WeakSet<object>();
  for (const [key, value] of Object.entries(fields)) {
    if (key === 'stack' && !stacks) continue;
    entry[key] = isSecret(key, value) ? '***' : clean(value, 1, seen);
    if (stacks && value instanceof Error && value.stack && fields.stack === undefined && fields[`${key}Stack`] === undefined) entry[`${key}Stack`] = scrubSecrets(value.stack);
    else if (key === 'stack' && typeof value === 'string') entry.stack = scrubSecrets(value);
  }
  return entry;
}

/**
 * One JSON object per line on stdout (what `pm2 logs` and the per-app log files show), written by
 * pino: `{"level":"info","time":"<ISO>","app":…,"msg":…,…fields}`. Errors in fields are one-line
 * strings (`code: message`); a `stack` field and the stacks of errors are written only at level
 * debug or trace. Redis passwords never appear: see `clean` and `shared/outbox/log-secrets.ts`.
 */
export function createLogger(app: string, write: (line: string) => void = (line) => process.stdout.write(line), options: LoggerOptions = {}): Logger {
  const level = options.level ?? DEFAULT_LOG_LEVEL;
  const stacks = level === 'trace' || level === 'debug';
  const base = pino(
    {
      level,
      base: { app },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // Belt and braces behind `clean`: the keys where ioredis keeps a password.
      redact: { paths: ['password', 'options.password', 'redisOptions.password', 'connection.options.password', '*.password'], censor: '***' },
    },
    { write },
  );
  const method = (name: LogLevel): LogMethod => {
    if (!base.isLevelEnabled(name)) return () => {};
    return (msg, fields) => base[name](cleanFields(msg, fields, stacks));
  };
  return loggerOf(method, () => level);
}

/** A Logger whose methods `method` makes, one per level. */
function loggerOf(method: (level: LogLevel) => LogMethod, level: () => LogLevel): Logger {
  const methods = Object.fromEntries(LOG_LEVELS.map((name) => [name, method(name)])) as Record<LogLevel, LogMethod>;
  return {
    ...methods,
    get level() {
      return level();
    },
  };
}

/** `log` with `fields` added to every line (e.g. the partition a consumer runs on). */
export function withFields(log: Logger, fields: LogFields): Logger {
  return loggerOf((level) => (msg, more) => log[level](msg, { ...fields, ...more }), () => log.level);
}
