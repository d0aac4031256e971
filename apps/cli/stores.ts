import type { Redis } from 'ioredis';
import type { Pool } from 'pg';
import { resolve } from 'node:path';
import { databaseFileOf, defaultDir, type OutboxConfig } from '../../shared/outbox/config.js';
import type { Db, OpenDatabaseOptions } from '../../shared/outbox/store/open-database.js';
import { ensureManagedRedis, MANAGED_HOST, managedRedisDir } from '../../shared/tooling/local/managed-redis.js';
import type { RedisConnectOptions } from '../../shared/outbox/redis/connect.js';
import { assertSameStore } from '../../shared/outbox/relay/store-pairing.js';
import { InvalidInputError } from '../../shared/outbox/errors/invalid-input-error.js';
import type { Partitions } from '../../shared/outbox/redis/partitions.js';
import { commandNamed } from './commands/index.js';
import { globalOptions } from './options.js';

// The store modules load ioredis and better-sqlite3, the costliest part of start-up: they are
// imported when a command opens a store, so `outbox --help` and bad arguments do not pay for them.

/** What a command needs of Redis beyond a working connection. */
export type RedisNeeds = Pick<RedisConnectOptions, 'requireNoEviction'>;

/** Refuses (exit 2) a command that does not run on the PostgreSQL store yet, before anything is opened. */
export function refuseOnPostgres(config: OutboxConfig, command: string): void {
  if (!config.databaseUrl) return;
  throw new InvalidInputError(`${command} does not run on the PostgreSQL store yet (--database / OUTBOX_DATABASE_URL is set): unset it to run it on app.db`);
}

/** `config`, after `refuseOnPostgres`. */
export function refusedOnPostgres(config: OutboxConfig, command: string): OutboxConfig {
  refuseOnPostgres(config, command);
  return config;
}

/** Refuses (exit 2) `--db` / `OUTBOX_DB` for a command that makes or wipes the lab's app.db in the data dir. */
export function refuseDbPath(config: OutboxConfig, command: string): void {
  if (config.db === undefined) return;
  throw new InvalidInputError(`${command} makes the lab's app.db in the data dir, not a database named by --db / OUTBOX_DB (${config.db}): unset it, or pick the data dir with --dir / OUTBOX_DIR`);
}

/**
 * Opens the outbox database (`--db` / `OUTBOX_DB`, else `<dir>/app.db`), runs `fn`, closes it;
 * refuses when the store is PostgreSQL (a command not ported to it). With `outboxOnly` any database
 * with the library's tables will do (a service's own); else the lab's orders table is needed too.
 */
export async function withDb<T>(config: OutboxConfig, fn: (db: Db) => T | Promise<T>, open: OpenDatabaseOptions = {}): Promise<T> {
  refuseOnPostgres(config, 'this command');
  const { openDatabaseFile } = await import('../../shared/outbox/store/open-database.js');
  const db = openDatabaseFile(databaseFileOf(config), { given: config.db !== undefined, ...open });
  try {
    return await fn(db);
  } finally {
    db.close();
  }
}

/** Whether the queues are spread over several partitions or a Redis Cluster (`--partitions` > 1, `--redis-cluster`). */
export const partitioned = (config: OutboxConfig): boolean => (config.partitions ?? 1) > 1 || Boolean(config.redisCluster);

/** The command this process runs, as `outbox --help` names it. */
function thisCommand(): string {
  const name = commandNamed(process.argv.slice(2), Object.keys(globalOptions));
  return name === undefined ? 'this command' : name;
}

/** Refuses (exit 2) a command that does not run across partitions yet, before anything is opened. */
export function refusePartitioned(config: OutboxConfig, command = thisCommand(), advice = 'run it with one partition on one Redis'): void {
  if (!partitioned(config)) return;
  const setting = config.redisCluster ? '--redis-cluster / OUTBOX_REDIS_CLUSTER is set' : `--partitions / OUTBOX_PARTITIONS is ${config.partitions}`;
  throw new InvalidInputError(`${command} does not run across partitions yet (${setting}): ${advice}`);
}

/**
 * With the default URL and nothing listening on its port, starts the managed Redis and says so on
 * stderr; `config.redisUrl` then names it, password included, for whatever the command runs next
 * (lab's child). Never for a Redis Cluster.
 */
async function ensureRedis(config: OutboxConfig): Promise<void> {
  if (config.redisCluster) return;
  const managed = await ensureManagedRedis(config.dir, config.redisUrl);
  if (managed.started) {
    config.redisUrl = managed.url;
    const dirOption = config.dir === resolve(defaultDir()) ? '' : ` --dir ${config.dir}`;
    // A server outbox did not start on the port (a system Redis): said in the same one line.
    const leftAlone =
      managed.leftAlone === undefined ? '' : `a Redis outbox did not start listens on ${MANAGED_HOST}:${managed.leftAlone}: left alone; `;
    console.error(
      `outbox: ${leftAlone}started redis-server on ${MANAGED_HOST}:${managed.port} (data in ${managedRedisDir(config.dir)}); stop it with "outbox redis stop${dirOption}"`,
    );
  }
}

/**
 * Connects to Redis (checked, fail fast), runs `fn`, disconnects; starts the managed Redis first
 * when needed (`ensureRedis`). One Redis, one partition: refuses (exit 2) with partitions or a
 * cluster, where a command must use `withPartitions`.
 */
export async function withRedis<T>(config: OutboxConfig, fn: (redis: Redis) => T | Promise<T>, needs: RedisNeeds = {}): Promise<T> {
  refusePartitioned(config);
  await ensureRedis(config);
  const { closeRedis, connectRedis } = await import('../../shared/outbox/redis/connect.js');
  const redis = await connectRedis(config.redisUrl, { name: 'outbox-cli', namespace: config.namespace, ...needs });
  try {
    return await fn(redis);
  } finally {
    await closeRedis(redis);
  }
}

/**
 * Every partition of the queues (shared/outbox/redis/partitions.ts), one connection each, on one
 * Redis or a Redis Cluster (`--partitions`, `--redis-cluster`); runs `fn`, disconnects them. One
 * partition on one Redis is the connection `withRedis` opens. The managed Redis is started as there.
 */
export async function withPartitions<T>(config: OutboxConfig, fn: (partitions: Partitions) => T | Promise<T>, needs: RedisNeeds = {}): Promise<T> {
  const { partitions, close } = await openPartitions(config, needs);
  try {
    return await fn(partitions);
  } finally {
    await close();
  }
}

/** What `withPartitions` opens, for a caller that keeps it open across calls (`status --watch`); `close` disconnects them. */
export async function openPartitions(config: OutboxConfig, needs: RedisNeeds = {}): Promise<{ partitions: Partitions; close: () => Promise<void> }> {
  await ensureRedis(config);
  const { closePartitions, connectTarget, connectTargetPartitions } = await import('../../shared/outbox/redis/connect-partitions.js');
  const partitions = await connectTargetPartitions(config, (options) => connectTarget(config, { name: 'outbox-cli', ...needs, ...options }));
  return { partitions, close: () => closePartitions(partitions) };
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

/** `withStores` across partitions: refuses when any partition serves another store, or another number of partitions. */
export function withPartitionStores<T>(config: OutboxConfig, fn: (db: Db, partitions: Partitions) => T | Promise<T>, needs: RedisNeeds = {}, open: OpenDatabaseOptions = {}): Promise<T> {
  return withDb(
    config,
    (db) =>
      withPartitions(
        config,
        async (partitions) => {
          await assertSameStore(db, partitions);
          return fn(db, partitions);
        },
        needs,
      ),
    open,
  );
}

/** True when the store is PostgreSQL (`--database` / OUTBOX_DATABASE_URL), false for app.db. */
export const onPostgres = (config: OutboxConfig): config is OutboxConfig & { databaseUrl: string } => Boolean(config.databaseUrl);

/**
 * Opens the PostgreSQL store (checked: reachable, with the outbox tables of this version unless
 * `tables` is false), runs `fn`, closes it. A PostgreSQL error `fn` meets (the server gone mid-command)
 * is one line, exit 5.
 */
export async function withPg<T>(config: OutboxConfig, fn: (pool: Pool) => T | Promise<T>, { tables = true, max = 4 } = {}): Promise<T> {
  const { assertPgOutbox, openPg } = await import('../../shared/runtime/postgres.js');
  const pool = await openPg(config.databaseUrl!, { max, name: 'outbox-cli' });
  try {
    if (tables) await assertPgOutbox(pool);
    return await fn(pool);
  } catch (error) {
    if (!isPgError(error)) throw error;
    const { pgUnavailable } = await import('../../shared/outbox/postgres/pg-errors.js');
    throw pgUnavailable('use the outbox tables', error);
  } finally {
    await pool.end().catch(() => {});
  }
}

/** An error of the server (it carries a severity) or of the connection to it. */
function isPgError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  return typeof (error as { severity?: unknown }).severity === 'string' || /^Connection terminated/.test(error.message);
}

/** Both stores on PostgreSQL; refuses a Redis that serves another store before `fn` runs. */
export function withPgStores<T>(config: OutboxConfig, fn: (pool: Pool, redis: Redis) => T | Promise<T>, needs: RedisNeeds = {}): Promise<T> {
  return withPg(config, (pool) =>
    withRedis(
      config,
      async (redis) => {
        const { assertPgSameStore } = await import('../../shared/outbox/postgres/pg-pairing.js');
        await assertPgSameStore(pool, redis);
        return fn(pool, redis);
      },
      needs,
    ),
  );
}

/** `withPgStores` across partitions. */
export function withPgPartitionStores<T>(config: OutboxConfig, fn: (pool: Pool, partitions: Partitions) => T | Promise<T>, needs: RedisNeeds = {}): Promise<T> {
  return withPg(config, (pool) =>
    withPartitions(
      config,
      async (partitions) => {
        const { assertPgSameStore } = await import('../../shared/outbox/postgres/pg-pairing.js');
        await assertPgSameStore(pool, partitions);
        return fn(pool, partitions);
      },
      needs,
    ),
  );
}

/** The lab's order service on the PostgreSQL store; refuses a database without the orders table (exit 5). */
export function withPgOrders<T>(config: OutboxConfig, fn: (orders: import('../../shared/lab/orders/pg-order-service.js').PgOrderService) => T | Promise<T>): Promise<T> {
  return withPg(config, async (pool) => {
    const { createPgOrderService } = await import('../../shared/lab/orders/pg-order-service.js');
    const { rows } = await pool.query<{ orders: string | null }>("SELECT to_regclass('orders')::text AS orders");
    if (rows[0].orders === null) {
      const { pgStoreName } = await import('../../shared/outbox/postgres/pg-store-meta.js');
      const { StoreUnavailableError } = await import('../../shared/outbox/errors/store-unavailable-error.js');
      throw new StoreUnavailableError(`${await pgStoreName(pool)} has no orders table (the lab's): run "outbox init" with the same --database / OUTBOX_DATABASE_URL first`);
    }
    return fn(await createPgOrderService(pool));
  });
}
