import { StoreUnavailableError } from './store-unavailable-error.js';

/**
 * Redis runs with a setting under which outbox cannot keep its guarantees (it may evict keys).
 * Exit code 5 in the CLI; the apps exit with `EXIT_CONFIG` so that pm2 does not restart them
 * into the same refusal.
 */
export class RedisSettingsError extends StoreUnavailableError {}
