import { format } from 'node:util';
import type { Logger } from '../outbox/logger.js';

/**
 * What libraries print on their own goes through `log` as one JSON line: ioredis's
 * `[ioredis] Unhandled error event: <stack>` and its `[WARN] …` lines, BullMQ's `console.error` /
 * `console.warn` calls, Node's process warnings (which it would print to stderr, several lines with
 * a hint). The first line of the text is the message; the whole text, stack included, is a `stack`
 * field, which the logger writes only at debug or trace.
 */
export function routeStrayOutput(log: Logger): void {
  const route =
    (level: 'debug' | 'info' | 'warn' | 'error') =>
    (...args: unknown[]): void => {
      const text = format(...args);
      const lines = text.split('\n');
      const msg = lines[0].trim() || 'console output';
      log[level](msg, lines.length > 1 ? { source: 'console', stack: text } : { source: 'console' });
    };
  console.error = route('error');
  console.warn = route('warn');
  console.info = route('info');
  console.log = route('info');
  console.debug = route('debug');
  console.trace = route('debug');
  // Node prints warnings through a 'warning' listener of its own: this one replaces it.
  process.removeAllListeners('warning');
  process.on('warning', (warning: Error & { code?: string }) => log.warn(warning.message, { source: 'process warning', warning: warning.name, code: warning.code }));
}
