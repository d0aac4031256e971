import type { LogFields, Logger } from './logger.js';

/**
 * A failure that repeats every second (a key of the wrong type, Redis down) is logged once per
 * incident: a warning with the same message and error as the last one is dropped until `clear()`.
 */
export function incidentLog(log: Logger) {
  let last: string | undefined;
  return {
    warn(msg: string, fields: LogFields & { error: string }): void {
      const key = `${msg}\n${fields.error}`;
      if (key === last) return;
      last = key;
      log.warn(msg, fields);
    },
    /** The failure is over: the next one is logged. */
    clear(): void {
      last = undefined;
    },
  };
}
