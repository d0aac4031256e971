import { Redis } from 'ioredis';
import { explainError, isConnectionError } from '../errors/explain-error.js';
import { incidentLog } from '../incident-log.js';
import { addUrlSecret } from '../log-secrets.js';
import type { Logger } from '../logger.js';
import { closeRedis } from './connect.js';

/**
 * Connections for BullMQ queues and workers (which need `maxRetriesPerRequest: null`). BullMQ does
 * not close connections it is given: `closeAll` does.
 */
export function bullConnections(url: string) {
  const connections: Redis[] = [];
  addUrlSecret(url);
  return {
    connection(): Redis {
      const connection = new Redis(url, { maxRetriesPerRequest: null });
      connection.on('error', () => {});
      connections.push(connection);
      return connection;
    },
    async closeAll(): Promise<void> {
      await Promise.all(connections.map(closeRedis));
    },
  };
}

/** What BullMQ's queues and workers have in common for their 'error' event. */
interface ErrorEmitter {
  on(event: 'error', listener: (error: Error) => void): unknown;
}

/**
 * BullMQ prints an error that a queue or worker has no 'error' listener for with console.error,
 * stack and all, and it passes on every error of its connections. Connection errors are left to the
 * app's own connection, which logs the loss and the reconnect; any other is logged as one line.
 */
export function logBullErrors(emitters: ErrorEmitter[], what: string, log: Logger): void {
  const errors = incidentLog(log);
  for (const emitter of emitters) {
    emitter.on('error', (error) => {
      if (isConnectionError(error)) return;
      errors.warn(`${what} queue error`, { error: explainError(error)?.message ?? error.message });
    });
  }
}
