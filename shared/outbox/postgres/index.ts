/**
 * The PostgreSQL store: the same outbox tables, appends in the user's own pg transactions, and
 * relays that run side by side (FOR UPDATE SKIP LOCKED). Only pg's types are imported: the library
 * loads no pg code; the user passes their own Pool.
 */
export { ensurePgOutboxTables, pgSchemaVersionOf, type Queryable } from './pg-schema.js';
export { createPgOutbox, type PgOutbox } from './pg-outbox.js';
export { createPgRelay, type PgRelay, type PgRelayOptions } from './pg-relay.js';
