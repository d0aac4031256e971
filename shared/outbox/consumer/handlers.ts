import type { Database } from 'better-sqlite3';
import { InvalidEventError } from '../errors/invalid-event-error.js';
import type { DeliveredEvent, EventDeclarations, EventSet, EventTypeOf } from '../events/define-events.js';
import type { OutboxEvent } from '../store/events.js';
import type { RedisEffect } from './effects.js';

/** A pure handler: given the event, the Redis effects it has. Runs on a worker thread; may run more than once (only its effects are applied once). */
export type RedisHandler<D extends EventDeclarations, T extends EventTypeOf<D>> = (event: DeliveredEvent<D, T>) => readonly RedisEffect[];

/** A handler that writes to the consumer's own database, inside the transaction that records the event as applied. */
export type DatabaseHandler<D extends EventDeclarations, T extends EventTypeOf<D>> = (event: DeliveredEvent<D, T>, db: Database) => void;

export type RedisHandlers<D extends EventDeclarations> = { [T in EventTypeOf<D>]?: RedisHandler<D, T> };
export type DatabaseHandlers<D extends EventDeclarations> = { [T in EventTypeOf<D>]?: DatabaseHandler<D, T> };

export interface RedisHandlerSet<D extends EventDeclarations = EventDeclarations> {
  mode: 'redis';
  events: EventSet<D>;
  handlers: RedisHandlers<D>;
}

export interface DatabaseHandlerSet<D extends EventDeclarations = EventDeclarations> {
  mode: 'database';
  events: EventSet<D>;
  handlers: DatabaseHandlers<D>;
}

/** What `createConsumer` takes as `handlers` (or a module URL whose export `handlers` is one). */
// Any declarations: a set is checked at run time, as each event is delivered.
export type HandlerSet = RedisHandlerSet<any> | DatabaseHandlerSet<any>;

/** Redis effects as data: each handler returns the effects of its event; the apply script applies them once, with the ack. */
export function defineRedisHandlers<D extends EventDeclarations>(events: EventSet<D>, handlers: RedisHandlers<D>): RedisHandlerSet<D> {
  return { mode: 'redis', events, handlers };
}

/** Effects in the consumer's own SQLite database, made once by an inbox row written in the same transaction. */
export function defineDatabaseHandlers<D extends EventDeclarations>(events: EventSet<D>, handlers: DatabaseHandlers<D>): DatabaseHandlerSet<D> {
  return { mode: 'database', events, handlers };
}

/**
 * Thrown by a handler for an event no attempt can handle (its payload contradicts itself, say): the
 * event is dead-lettered at once with this message, not retried. Any other error is retried.
 */
export class PoisonEventError extends Error {
  override name = 'PoisonEventError';
}

/**
 * The event as its handler gets it (its declaration's `deliver`: the payload parsed by its schema),
 * and that handler; or why no attempt can handle it (poison: dead-lettered with that reason): its
 * type is not declared or has no handler, its key names another aggregate type, or its payload
 * does not pass its schema.
 */
export function deliver(set: HandlerSet, event: OutboxEvent): { delivered: DeliveredEvent<EventDeclarations>; handler: (...args: never[]) => unknown } | { poison: string } {
  let delivered: DeliveredEvent<EventDeclarations>;
  try {
    delivered = (set.events as EventSet<EventDeclarations>).deliver(event);
  } catch (error) {
    if (error instanceof InvalidEventError) return { poison: error.message };
    throw error;
  }
  const handler = Object.hasOwn(set.handlers, event.type) ? (set.handlers as Record<string, (...args: never[]) => unknown>)[event.type] : undefined;
  if (typeof handler !== 'function') return { poison: `no handler for event type ${event.type}` };
  return { delivered, handler };
}
