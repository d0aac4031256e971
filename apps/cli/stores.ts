import type { Redis } from 'ioredis';
import { resolve } from 'node:path';
import { defaultDir, type OutboxConfig } from '../../shared/outbox/config.js';
import type { Db, OpenDatabaseOptions } from '../../shared/outbox/store/open-database.js';
import { ensureManagedRedis, MANAGED_HOST, managedRedisDir, managedRedisPort } from '../../shared/tooling/local/managed-redis.js';
import type { RedisConnectOptions } from '../../shared/outbox/redis/connect.js';
import { assertSameStore } from '../../shared/outbox/relay/store-pairing.js';

// The store modules load ioredis and better-sqlite3, the costliest part of start-up: they are
// imported when a command opens a store, so `outbox --help` and bad arguments do not pay for them.

/** What a command needs of Redis beyond a working connection. */
export type RedisNeeds = Pick<RedisConnectOptions, 'requireNoEviction'>;

/** Opens app.db, runs `fn`, closes it. */
export async function withDb<T>(config: OutboxConfig, fn: (db: Db) => T | Promise<T>, open: OpenDatabaseOptions = {}): Promise<T> {
  const { openDatabase } = await import('../../shared/outbox/store/open-database.js');
  const db = openDatabase(config.dir, open);
  try {
    return await fn(db);
  } finally {
    db.close();
  }
}

/**
 * Connects to Redis (checked, fail fast), runs `fn`, disconnects. With the default URL and nothing
 * listening on its port, starts the managed Redis first and says so on stderr; `config.redisUrl`
 * then names it, password included, for whatever the command runs next (lab's child).
 */
export async function withRedis<T>(config: OutboxConfig, fn: (redis: Redis) => T | Promise<T>, needs: RedisNeeds = {}): Promise<T> {
  const managed = await ensureManagedRedis(config.dir, config.redisUrl);
  if (managed.started) {
    config.redisUrl = managed.url;
    const dirOption = config.dir === resolve(defaultDir()) ? '' : ` --dir ${config.dir}`;
    console.error(
      `outbox: started redis-server on ${MANAGED_HOST}:${managedRedisPort()} (data in ${managedRedisDir(config.dir)}); stop it with "outbox redis stop${dirOption}"`,
    );
  }
  const { closeRedis, connectRedis } = await import('../../shared/outbox/redis/connect.js');
  const redis = await connectRedis(config.redisUrl, { name: 'outbox-cli', namespace: config.namespace, ...needs });
  try {
    return await fn(redis);
  } finally {
    await closeRedis(redis);
  }
}

/**
 * Both stores; app.db is checked first because opening it has no side effects. Refuses a pair that
 * does not belong together (Redis serves another store) before `fn` runs.
 */
export function withStores<T>(config: OutboxConfig, fn: (db: Db, redis: Redis) => T | Promise<T>, needs: RedisNeeds = {}, open: OpenDatabaseOptions = {}): Promise<T> {
  return withDb(
    config,
    (db) =>
      withRedis(
        config,
        async (redis) => {
          await assertSameStore(db, redis);
          return fn(db, redis);
        },
        needs,
      ),
    open,
  );
}
