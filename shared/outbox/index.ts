/**
 * The public API of the outbox library (package.json "exports"). Everything a service needs to
 * write events in its own transactions, relay them and consume them with its own handlers is
 * exported here; nothing else under shared/ is part of the API.
 */
export { defineEvents } from './events/define-events.js';
export type {
  AggregateTypeOf,
  AnyDeliveredEvent,
  DeliveredEvent,
  EventDeclaration,
  EventDeclarations,
  EventSet,
  EventTypeOf,
  NewEvent,
  PayloadInputOf,
  PayloadOf,
} from './events/define-events.js';
export { aggregateKey, splitAggregateKey } from './events/aggregate-key.js';
export { createOutbox, type AppendedEvent, type Outbox, type OutboxOptions } from './store/outbox.js';
export { connectRedis, closeRedis, type RedisConnectOptions } from './redis/connect.js';
export { createRelay, DEFAULT_RELAY_BATCH_SIZE, type Relay, type RelayOptions, type RelayBatch } from './relay/relay.js';
export { OutboxError } from './errors/outbox-error.js';
export { InvalidInputError } from './errors/invalid-input-error.js';
export { InvalidEventError } from './errors/invalid-event-error.js';
export { StoreUnavailableError } from './errors/store-unavailable-error.js';
export { StoreBehindError } from './errors/store-behind-error.js';
export { StoreMismatchError } from './errors/store-mismatch-error.js';
export { StoreRefusedError } from './errors/store-refused-error.js';
export { ConfigError } from './errors/config-error.js';
export { createConsumer, checkConsumerOptions, type CreateConsumerOptions, type OutboxConsumer, type StartOptions } from './consumer/create-consumer.js';
export type { ConsumeStats } from './consumer/consumer.js';
export { effect, type RedisEffect, type RedisEffectOp } from './consumer/effects.js';
export { createConsumerDatabase } from './consumer/inbox/consumer-database.js';
export {
  defineRedisHandlers,
  defineDatabaseHandlers,
  PoisonEventError,
  type HandlerSet,
  type RedisHandlerSet,
  type DatabaseHandlerSet,
  type RedisHandler,
  type DatabaseHandler,
} from './consumer/handlers.js';
export {
  defineVerifyChecks,
  invariantCheck,
  type InvariantCheck,
  type VerifiedEvent,
  type VerifyCheck,
  type VerifyCheckSet,
  type VerifyContext,
  type VerifyContextOfAnyStore,
  type VerifyProducer,
} from './verify/verify-checks.js';
export { createOutboxMetrics, type OutboxMetrics, type OutboxMetricsOptions } from './metrics/outbox-metrics.js';
export { createPgOutbox, createPgRelay, ensurePgOutboxTables, type PgOutbox, type PgRelay, type PgRelayOptions, type Queryable } from './postgres/index.js';
