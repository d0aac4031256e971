import { strike, type HandlerFault } from './handler-fault.js';
import type { EncodedEffect, HandlerResult } from './handler-result.js';
import { loadHandlerSet } from './load-handlers.js';
import { runRedisHandlers } from './run-redis-handlers.js';
import type { OutboxEvent } from '../store/events.js';

export interface HandlerTask {
  /** URL of the module whose export `handlers` is the handler set. */
  module: string;
  /** The events, `encodeEvents`: one text crosses to the thread as a copy of its bytes, where objects are cloned field by field on the consumer's (busiest) thread. */
  events: string;
  /** The number of this attempt at each event (1 = first). */
  attempts: number[];
  cpuCostMs: number;
  /** The injected failure in force when the task was sent (OUTBOX_HANDLER_FAIL or its file), if any. */
  fault?: HandlerFault;
  /** One BigInt64 the thread sets to Date.now() when it starts the task: the handler timeout counts from there. */
  startedAt?: SharedArrayBuffer;
}

/** An event's fields, in the order of its row in a task. */
const FIELDS = ['eventId', 'storeId', 'aggregateId', 'seq', 'type', 'payload', 'createdAt', 'prevCreatedAt'] as const;
// A field added to OutboxEvent must be added to FIELDS, or it would not reach the handlers: this line stops compiling.
const everyField: Exclude<keyof OutboxEvent, (typeof FIELDS)[number]> extends never ? true : never = true;
void everyField;

/**
 * The events of a task as one JSON text, each a row of its fields' values (FIELDS): arrays are
 * written and read back faster than objects. An absent field (`createdAt`, `prevCreatedAt`) is written as null.
 */
export function encodeEvents(events: OutboxEvent[]): string {
  return JSON.stringify(events.map((e) => [e.eventId, e.storeId, e.aggregateId, e.seq, e.type, e.payload, e.createdAt, e.prevCreatedAt]));
}

/** The events `encodeEvents` wrote, as they were: a null field is absent (no field of an event is null). */
export function decodeEvents(text: string): OutboxEvent[] {
  return (JSON.parse(text) as unknown[][]).map((row) => {
    const event: Record<string, unknown> = {};
    FIELDS.forEach((field, i) => {
      if (row[i] !== null) event[field] = row[i];
    });
    return event as unknown as OutboxEvent;
  });
}

/** A task's results as one JSON text: an event's effects as their array alone, `{error}` and `{poison}` as they are. */
export function encodeResults(results: HandlerResult[]): string {
  return JSON.stringify(results.map((result) => ('effects' in result ? result.effects : result)));
}

/** The results `encodeResults` wrote. */
export function decodeResults(text: string): HandlerResult[] {
  return (JSON.parse(text) as (EncodedEffect[] | HandlerResult)[]).map((result) => (Array.isArray(result) ? { effects: result } : result));
}

/**
 * Runs in a piscina worker thread: one task of events (a lane: all of a few aggregates, in order;
 * or one event being retried) through the handler set of `module`, loaded once per thread.
 * Resolves the results as `encodeResults` writes them.
 */
export default async function handle({ module, events, attempts, cpuCostMs, fault, startedAt }: HandlerTask): Promise<string> {
  if (startedAt) Atomics.store(new BigInt64Array(startedAt), 0, BigInt(Date.now()));
  const set = await loadHandlerSet(module);
  const results = runRedisHandlers(set, decodeEvents(events), { cpuCostMs, beforeEach: fault ? (event, i) => strike(fault, event, attempts[i]) : undefined });
  return encodeResults(results);
}
