import { count, duration, readSettings, text, type Argv, type ValuesOf } from './settings.js';
import { storeSettings } from './store-settings.js';

/**
 * The producer app's settings (outbox-producer). It never talks to Redis, so it reads neither
 * REDIS_URL nor OUTBOX_NAMESPACE: a bad one cannot stop it.
 */
export const producerSettings = {
  dir: storeSettings.dir,
  /** The PostgreSQL store instead of app.db. Default none. */
  databaseUrl: storeSettings.databaseUrl,
  /** HTTP port. Default 3000. */
  port: count({ flag: 'port', env: 'PORT', default: '3000', min: 1, max: 65_535, describe: 'HTTP port' }),
  /** Address to bind. Default 127.0.0.1. */
  /** How long a connection may stay idle (no request, or a request not sent whole). Default 10s. */
  idleTimeoutMs: duration({
    flag: 'http-idle-timeout',
    env: 'OUTBOX_HTTP_IDLE_TIMEOUT',
    default: '10s',
    min: 100,
    max: 600_000,
    describe: 'how long an HTTP connection may stay idle or send a request slowly before it is closed',
  }),
  /** Open connections at most; more are refused until some close. Default 1024. */
  maxConnections: count({ flag: 'http-max-connections', env: 'OUTBOX_HTTP_MAX_CONNECTIONS', default: '1024', min: 1, max: 100_000, describe: 'open HTTP connections at most' }),
  host: text({ flag: 'host', env: 'HOST', default: '127.0.0.1', range: 'an address', describe: 'address to bind', check: (value) => (value.trim() === '' ? 'must be an address to bind' : undefined) }),
  /** Built-in traffic, operations/s; 0 = off. Default 0. */
  rate: count({ flag: 'rate', env: 'OUTBOX_RATE', default: '0', min: 0, max: 100_000, describe: 'built-in traffic, operations/s; 0 = off' }),
  /** How long the built-in traffic runs; 0s = until stopped. Default 0s. */
  durationMs: duration({ flag: 'duration', env: 'OUTBOX_DURATION', default: '0s', describe: 'how long the built-in traffic runs, e.g. 60s; 0s = until stopped' }),
  /** Random seed of the built-in traffic. Default 1. */
  seed: count({ flag: 'seed', env: 'OUTBOX_SEED', default: '1', min: 0, max: 2 ** 31, describe: 'traffic random seed' }),
};

export type ProducerConfig = ValuesOf<typeof producerSettings>;

/** The producer app's settings from the flags, else the environment, else the defaults; checked. */
export function producerConfig(argv: Argv = {}, env: NodeJS.ProcessEnv = process.env): ProducerConfig {
  return readSettings(producerSettings, argv, env);
}
