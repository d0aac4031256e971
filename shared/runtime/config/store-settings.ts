import { resolve } from 'node:path';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { clusterNodesProblem, databaseUrlProblem, defaultDir, namespaceProblem, redisUrlProblem, type OutboxConfig } from '../../outbox/config.js';
import { MAX_PARTITIONS } from '../../outbox/redis/partitions.js';
import { managedRedisUrl } from '../../tooling/local/managed-redis.js';
import { count, custom, readSettings, type Argv, type Setting } from './settings.js';

function checked(problemOf: (raw: string) => string | undefined) {
  return (raw: string, name: string) => {
    const problem = problemOf(raw);
    if (problem !== undefined) throw new InvalidInputError(`${name} ${problem}`);
    return raw;
  };
}

/** Where the stores are: every command and app takes these (the producer `dir` only: it never talks to Redis). */
export const storeSettings = {
  dir: {
    flag: 'dir',
    env: 'OUTBOX_DIR',
    default: (env: NodeJS.ProcessEnv) => defaultDir(env),
    defaultText: '~/outbox',
    range: 'a path',
    describe: 'data directory holding app.db and the artifacts',
    parse: (raw: string) => resolve(raw),
  } satisfies Setting<string>,
  redisUrl: custom({
    flag: 'redis',
    env: 'REDIS_URL',
    // The managed Redis of the data dir, password included once it has one.
    default: (env, argv) => managedRedisUrl(resolve(typeof argv.dir === 'string' && argv.dir !== '' ? argv.dir : defaultDir(env)), env),
    defaultText: 'redis://127.0.0.1:6379 (port: env OUTBOX_REDIS_PORT) with the password of <dir>/redis/password; the CLI (and outbox-redis under pm2) starts it when nothing listens',
    range: 'a redis:// or rediss:// URL',
    describe: 'Redis URL (rediss:// for TLS)',
    parse: checked(redisUrlProblem),
  }),
  namespace: custom({
    flag: 'namespace',
    env: 'OUTBOX_NAMESPACE',
    default: '',
    defaultText: 'none',
    range: '1-64 letters, digits, ".", "_" or "-"; not outbox, inventory, bull nor outbox.<x>',
    describe: 'prefix of every Redis key and BullMQ queue, so deployments can share a Redis',
    parse: checked(namespaceProblem),
  }),
  databaseUrl: custom({
    flag: 'database',
    env: 'OUTBOX_DATABASE_URL',
    default: '',
    defaultText: 'none: app.db in the data dir (SQLite)',
    range: 'a postgres:// or postgresql:// URL',
    describe: 'the outbox store on PostgreSQL, postgres://user[:password]@host[:port]/database',
    parse: checked(databaseUrlProblem),
  }),
  redisCluster: custom({
    flag: 'redis-cluster',
    env: 'OUTBOX_REDIS_CLUSTER',
    default: '',
    defaultText: 'none: the Redis of --redis / REDIS_URL',
    range: 'host:port,… or redis://[:password@]host:port,…; one password for every node',
    describe: 'a Redis Cluster instead, by some of its nodes: host:port,host:port (or redis://:password@host:port,…)',
    parse: checked((raw) => (raw === '' ? undefined : clusterNodesProblem(raw))),
  }),
  partitions: count({
    flag: 'partitions',
    env: 'OUTBOX_PARTITIONS',
    default: '1',
    min: 1,
    max: MAX_PARTITIONS,
    describe: 'events are partitioned by aggregate into this many queues, consumed by lease; the same on every relay and consumer (1: the seed\'s key names)',
  }),
};

/**
 * The CLI's settings: the stores', and the outbox database by its path (`--db` / `OUTBOX_DB`), so
 * that the operations commands work on a service's own database, not only on the lab's app.db.
 * The apps do not read it: they open `<dir>/app.db`.
 */
export const cliStoreSettings = {
  ...storeSettings,
  db: custom({
    flag: 'db',
    env: 'OUTBOX_DB',
    default: '',
    defaultText: 'app.db in the data dir',
    describe: "the outbox database (SQLite) by its path: any database with the library's tables, e.g. a service's own (made by createOutbox)",
    parse: (raw) => (raw.trim() === '' ? '' : resolve(raw.trim())),
  }),
};

/** The stores' settings from the flags, else the environment, else the defaults; checked before any connection opens. */
export function storeConfigOf(argv: Argv, env: NodeJS.ProcessEnv = process.env): OutboxConfig {
  const { db, ...config } = readSettings(cliStoreSettings, argv, env);
  if (db === '') return config;
  if (config.databaseUrl) {
    throw new InvalidInputError('--db / OUTBOX_DB names a SQLite database and --database / OUTBOX_DATABASE_URL the PostgreSQL store: give one of them');
  }
  return { ...config, db };
}
