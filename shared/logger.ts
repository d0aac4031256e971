import { redactUrl } from './config.js';

export type LogFields = Record<string, unknown>;

export interface Logger {
  /** Per-batch and per-event detail: written only when OUTBOX_LOG_LEVEL is `debug`. */
  debug: (msg: string, fields?: LogFields) => void;
  info: (msg: string, fields?: LogFields) => void;
  warn: (msg: string, fields?: LogFields) => void;
  error: (msg: string, fields?: LogFields) => void;
}

function plain(value: unknown): unknown {
  if (value instanceof Error) return (value as { code?: string }).code ? `${(value as { code?: string }).code}: ${value.message}` : value.message;
  // Anything that looks like a connection URL is printed without its password.
  if (typeof value === 'string' && /^rediss?:\/\//.test(value)) return redactUrl(value);
  return value;
}

/**
 * One JSON object per line on stdout (what `pm2 logs` and the per-app log files show):
 * `{"time","level","app","msg",...fields}`.
 */
export function createLogger(app: string, write: (line: string) => void = (line) => process.stdout.write(line)): Logger {
  const log = (level: string) => (msg: string, fields: LogFields = {}) => {
    const entry: LogFields = { time: new Date().toISOString(), level, app, msg };
    for (const [key, value] of Object.entries(fields)) entry[key] = plain(value);
    write(`${JSON.stringify(entry)}\n`);
  };
  const debug = process.env.OUTBOX_LOG_LEVEL === 'debug' ? log('debug') : () => {};
  return { debug, info: log('info'), warn: log('warn'), error: log('error') };
}
