/**
 * The public API of the outbox library (package.json "exports"). Everything a service needs to
 * write events in its own transactions, relay them and consume them with its own handlers is
 * exported here; nothing else under shared/ is part of the API.
 */
export { connectRedis, closeRedis, type RedisConnectOptions } from './redis/connect.js';
export { createRelay, DEFAULT_RELAY_BATCH_SIZE, type Relay, type RelayOptions, type RelayBatch } from './relay/relay.js';
export { OutboxError } from './errors/outbox-error.js';
export { InvalidInputError } from './errors/invalid-input-error.js';
export { StoreUnavailableError } from './errors/store-unavailable-error.js';
export { StoreMismatchError } from './errors/store-mismatch-error.js';
