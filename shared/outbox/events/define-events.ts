import type { z } from 'zod';
import { InvalidEventError } from '../errors/invalid-event-error.js';
import { InvalidInputError } from '../errors/invalid-input-error.js';
import { aggregateKey, aggregateTypeProblem, splitAggregateKey } from './aggregate-key.js';

/**
 * One event type: the aggregate type it belongs to and the zod schema of its payload. zod because
 * most services already declare their data with it, its issues make one-line errors, and a parse
 * (~1 µs) is far below the SQLite insert it guards.
 */
export interface EventDeclaration<A extends string = string, S extends z.ZodType = z.ZodType> {
  aggregate: A;
  payload: S;
}

/** Event type name → declaration. */
export type EventDeclarations = Record<string, EventDeclaration>;

/** The declared event type names. */
export type EventTypeOf<D extends EventDeclarations> = Extract<keyof D, string>;

/** The aggregate type an event type belongs to. */
export type AggregateTypeOf<D extends EventDeclarations, T extends EventTypeOf<D>> = D[T]['aggregate'];

/** The payload handlers get: the schema's output. */
export type PayloadOf<D extends EventDeclarations, T extends EventTypeOf<D>> = z.output<D[T]['payload']>;

/** The payload `append` takes: the schema's input. */
export type PayloadInputOf<D extends EventDeclarations, T extends EventTypeOf<D>> = z.input<D[T]['payload']>;

/** What a handler receives: one delivered event, its payload checked against its declaration. */
export interface DeliveredEvent<D extends EventDeclarations, T extends EventTypeOf<D> = EventTypeOf<D>> {
  eventId: string;
  /** The store (database) the event was appended to. */
  storeId: string;
  aggregateType: AggregateTypeOf<D, T>;
  /** The aggregate's id as the key holds it: always a string (`order:42` → `"42"`). */
  aggregateId: string;
  seq: number;
  type: T;
  payload: PayloadOf<D, T>;
}

/** Any delivered event of the set: a union over the declared types, so `switch (e.type)` narrows. */
export type AnyDeliveredEvent<D extends EventDeclarations> = { [T in EventTypeOf<D>]: DeliveredEvent<D, T> }[EventTypeOf<D>];

/** An event to append, as the caller gives it. */
export interface NewEvent<D extends EventDeclarations, T extends EventTypeOf<D> = EventTypeOf<D>> {
  aggregateType: AggregateTypeOf<D, T>;
  /** A positive integer (stored as its decimal text) or a non-empty string. */
  aggregateId: string | number;
  type: T;
  payload: PayloadInputOf<D, T>;
}

/** An event the declarations accepted: its aggregate key and its payload as JSON text. */
export interface CheckedEvent {
  type: string;
  aggregate: string;
  payloadJson: string;
}

/** A delivered event in its wire form, before its declaration checked it. */
export interface RawDeliveredEvent {
  eventId: string;
  storeId: string;
  /** The aggregate key, `<aggregateType>:<aggregateId>`. */
  aggregateId: string;
  seq: number;
  type: string;
  payload: unknown;
}

/** The declared events: what `createOutbox` appends and what the consumer's handlers receive. */
export interface EventSet<D extends EventDeclarations> {
  readonly declarations: D;
  readonly types: readonly EventTypeOf<D>[];
  has(type: unknown): type is EventTypeOf<D>;
  /** Checks an event to append; throws `InvalidEventError` with one line saying what is wrong. */
  check(event: NewEvent<D>): CheckedEvent;
  /** Checks a delivered event against its declaration; throws `InvalidEventError` with one line. */
  deliver(event: RawDeliveredEvent): AnyDeliveredEvent<D>;
}

const EVENT_TYPE_PATTERN = /^[A-Za-z][A-Za-z0-9_.-]{0,127}$/;

/** `OrderPlaced payload: qty: Too small: expected number to be >0; sku: ...` */
function payloadProblem(type: string, error: z.ZodError): string {
  const issues = error.issues.map((issue) => (issue.path.length > 0 ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message));
  return `${type} payload: ${issues.join('; ')}`;
}

/**
 * Declares the event types of a service, once, for both sides:
 * `defineEvents({ OrderPlaced: { aggregate: 'order', payload: z.object({ ... }) } })`.
 * A declaration that is not one (bad name, bad aggregate type, no zod schema) is refused here.
 */
export function defineEvents<const D extends EventDeclarations>(declarations: D): EventSet<D> {
  const types = Object.keys(declarations) as EventTypeOf<D>[];
  if (types.length === 0) throw new InvalidInputError('defineEvents needs at least one event type');
  for (const type of types) {
    const declaration = declarations[type] as EventDeclaration | undefined;
    if (!EVENT_TYPE_PATTERN.test(type)) {
      throw new InvalidInputError(`event type ${JSON.stringify(type)} must be 1-128 characters: a letter, then letters, digits, "_", "." or "-"`);
    }
    const problem = aggregateTypeProblem(declaration?.aggregate);
    if (problem) throw new InvalidInputError(`${type}: ${problem}`);
    if (typeof (declaration?.payload as { safeParse?: unknown } | undefined)?.safeParse !== 'function') {
      throw new InvalidInputError(`${type}: payload must be a zod schema (e.g. z.object({ ... }))`);
    }
  }
  const known = new Set<string>(types);
  const has = (type: unknown): type is EventTypeOf<D> => typeof type === 'string' && known.has(type);

  function declarationOf(type: unknown): EventDeclaration {
    if (!has(type)) throw new InvalidEventError(`unknown event type ${JSON.stringify(type)}: declare it in defineEvents`);
    return declarations[type];
  }

  function assertAggregate(type: string, declaration: EventDeclaration, aggregateType: unknown): void {
    if (aggregateType !== declaration.aggregate) {
      throw new InvalidEventError(`${type} belongs to aggregate ${JSON.stringify(declaration.aggregate)}, got ${JSON.stringify(aggregateType)}`);
    }
  }

  return {
    declarations,
    types,
    has,
    check({ aggregateType, aggregateId, type, payload }) {
      const declaration = declarationOf(type);
      assertAggregate(type, declaration, aggregateType);
      const aggregate = aggregateKey(aggregateType, aggregateId);
      const parsed = declaration.payload.safeParse(payload);
      if (!parsed.success) throw new InvalidEventError(payloadProblem(type, parsed.error));
      // The payload is stored as given (it validated): the consumer parses that same input with the
      // same schema, so a schema with transforms is applied once, on delivery.
      let payloadJson: string;
      try {
        payloadJson = JSON.stringify(payload);
      } catch (error) {
        throw new InvalidEventError(`${type} payload: not JSON (${(error as Error).message})`);
      }
      if (payloadJson === undefined) throw new InvalidEventError(`${type} payload: not JSON (${typeof payload})`);
      return { type, aggregate, payloadJson };
    },
    deliver(event) {
      const declaration = declarationOf(event.type);
      const split = splitAggregateKey(event.aggregateId);
      if (!split) throw new InvalidEventError(`aggregate key ${JSON.stringify(event.aggregateId)} is not "<aggregateType>:<aggregateId>"`);
      assertAggregate(event.type, declaration, split.aggregateType);
      const parsed = declaration.payload.safeParse(event.payload);
      if (!parsed.success) throw new InvalidEventError(payloadProblem(event.type, parsed.error));
      return {
        eventId: event.eventId,
        storeId: event.storeId,
        aggregateType: split.aggregateType,
        aggregateId: split.aggregateId,
        seq: event.seq,
        type: event.type,
        payload: parsed.data,
      } as AnyDeliveredEvent<D>;
    },
  };
}
