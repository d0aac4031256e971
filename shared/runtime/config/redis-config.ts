import { DEFAULT_MANAGED_PORT, managedRedisPort } from '../../tooling/local/managed-redis.js';
import { custom, readSettings, type ValuesOf } from './settings.js';
import { storeSettings } from './store-settings.js';

/** The managed Redis's settings (outbox-redis, run by ecosystem.config.cjs when REDIS_URL is unset). */
export const managedRedisSettings = {
  /** Its data and password go under `<dir>/redis`. */
  dir: { ...storeSettings.dir, flag: undefined },
  /** The port redis-server listens on (127.0.0.1), and the apps' default Redis. Default 6379. */
  port: custom({
    env: 'OUTBOX_REDIS_PORT',
    default: String(DEFAULT_MANAGED_PORT),
    range: 'a port from 1 to 65535',
    describe: 'port of the managed redis-server',
    parse: (raw) => managedRedisPort({ OUTBOX_REDIS_PORT: raw }),
  }),
};

export type ManagedRedisConfig = ValuesOf<typeof managedRedisSettings>;

export function managedRedisConfig(env: NodeJS.ProcessEnv = process.env): ManagedRedisConfig {
  return readSettings(managedRedisSettings, {}, env);
}
