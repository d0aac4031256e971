import type { Options } from 'yargs';
import { DEFAULT_REDIS_URL, validate, withDefaults, type OutboxConfig } from '../../shared/config.js';

/** The options every command takes, defined once. */
export const globalOptions = {
  dir: {
    type: 'string',
    describe: 'data directory holding app.db and the artifacts [env OUTBOX_DIR, default ~/outbox]',
  },
  redis: {
    type: 'string',
    describe: `Redis URL [env REDIS_URL, default ${DEFAULT_REDIS_URL} (port: env OUTBOX_REDIS_PORT) with the password of <dir>/redis/password; started there when nothing listens]`,
  },
  namespace: {
    type: 'string',
    describe: 'prefix of every Redis key and BullMQ queue, so deployments can share a Redis [env OUTBOX_NAMESPACE, default none]',
  },
} satisfies Record<string, Options>;

/** `init --force` and `lab` refuse while an app has app.db open (see shared/local/attached-apps.ts). */
export const ignoreAttachedOption = {
  type: 'boolean',
  default: false,
  describe: 'go ahead while apps (producer, relay) have app.db open: they refuse work until they switch to the new app.db',
} satisfies Options;

export interface GlobalArgs {
  dir?: string;
  redis?: string;
  namespace?: string;
}

export function configOf(argv: GlobalArgs): OutboxConfig {
  return validate(withDefaults({ dir: argv.dir, redisUrl: argv.redis, namespace: argv.namespace }));
}
