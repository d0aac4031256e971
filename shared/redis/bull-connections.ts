import { Redis } from 'ioredis';
import { closeRedis } from './connect.js';

/**
 * Connections for BullMQ queues and workers (which need `maxRetriesPerRequest: null`). BullMQ does
 * not close connections it is given: `closeAll` does.
 */
export function bullConnections(url: string) {
  const connections: Redis[] = [];
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
