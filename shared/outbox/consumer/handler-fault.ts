import { readFileSync } from 'node:fs';
import type { OutboxEvent } from '../store/events.js';
import { InvalidInputError } from '../errors/invalid-input-error.js';
import type { Logger } from '../logger.js';

/**
 * A handler failure injected on purpose, for tests and chaos: env `OUTBOX_HANDLER_FAIL`, read by
 * the consumer app's worker threads. Off when unset.
 *
 * `<kind>:<probability>`, `<kind>-first:<attempts>` or `<kind>-until:<epoch ms>`, optionally
 * followed by `@<aggregate>` or `@<aggregate>:<seq>` to hit only those events (`<aggregate>` is the
 * id part of the aggregate key: `@7` hits `order:7`). Kinds: `throw` (the
 * handler throws for that event), `crash` (the worker thread exits: its whole lane task is lost),
 * `hang` (the thread never answers: the handler timeout stops it).
 *
 * `OUTBOX_HANDLER_FAIL_FILE` names a file whose contents, while it exists, are the fault in force
 * instead: `outbox chaos` switches failures on and off with it, without restarting the consumer.
 */
export interface HandlerFault {
  kind: 'throw' | 'crash' | 'hang';
  when: { probability: number } | { firstAttempts: number } | { until: number };
  /** The id part of the aggregate key (`7` for `order:7`). */
  aggregateId?: string;
  seq?: number;
}

const FORMAT = /^(throw|crash|hang)(?:-(first|until))?:(\d+(?:\.\d+)?)(?:@(\d+)(?::(\d+))?)?$/;

/** Parses `OUTBOX_HANDLER_FAIL`; undefined when unset or empty. */
export function parseHandlerFault(spec: string | undefined): HandlerFault | undefined {
  if (spec === undefined || spec.trim() === '') return undefined;
  const match = FORMAT.exec(spec.trim());
  const value = Number(match?.[3]);
  const probabilityOk = match?.[2] !== undefined || value <= 1;
  const wholeOk = match?.[2] === undefined || Number.isInteger(value);
  if (!match || !probabilityOk || !wholeOk) {
    throw new InvalidInputError(
      `OUTBOX_HANDLER_FAIL must be <throw|crash|hang>:<probability 0-1>, <kind>-first:<attempts> or <kind>-until:<epoch ms>, ` +
        `optionally followed by @<aggregate>[:<seq>], got ${JSON.stringify(spec)}: fix it, or unset it to turn injected failures off`,
    );
  }
  const [, kind, mode, , aggregate, seq] = match;
  return {
    kind: kind as HandlerFault['kind'],
    when: mode === 'first' ? { firstAttempts: value } : mode === 'until' ? { until: value } : { probability: value },
    aggregateId: aggregate === undefined ? undefined : String(Number(aggregate)),
    seq: seq === undefined ? undefined : Number(seq),
  };
}

/** How often the consumer reads `OUTBOX_HANDLER_FAIL_FILE` (ms): failures switch on and off within this. */
const FILE_CHECK_MS = 100;

/**
 * The fault in force now, for the consumer's main thread to hand to each task: the file's
 * (re-read at most every 100 ms) while it exists, else `envFault`. A file that does not parse is
 * logged once per content and ignored.
 */
export function handlerFaultSource(envFault: HandlerFault | undefined, file: string | undefined, log: Logger): () => HandlerFault | undefined {
  if (!file) return () => envFault;
  let checkedAt = 0;
  let content: string | undefined;
  let current = envFault;
  return () => {
    if (Date.now() - checkedAt < FILE_CHECK_MS) return current;
    checkedAt = Date.now();
    let read: string | undefined;
    try {
      read = readFileSync(file, 'utf8');
    } catch {
      // No file (or none readable): no switched fault.
    }
    if (read === content) return current;
    content = read;
    try {
      current = read === undefined ? envFault : parseHandlerFault(read);
    } catch (error) {
      log.warn((error as Error).message.replace('OUTBOX_HANDLER_FAIL', `OUTBOX_HANDLER_FAIL_FILE (${file})`), { ignored: read });
      current = envFault;
    }
    return current;
  };
}

function hits(fault: HandlerFault, event: OutboxEvent, attempt: number): boolean {
  if (fault.aggregateId !== undefined && event.aggregateId.slice(event.aggregateId.indexOf(':') + 1) !== fault.aggregateId) return false;
  if (fault.seq !== undefined && fault.seq !== event.seq) return false;
  const { when } = fault;
  if ('probability' in when) return Math.random() < when.probability;
  if ('firstAttempts' in when) return attempt <= when.firstAttempts;
  return Date.now() < when.until;
}

/**
 * Fails this attempt at `event` when `fault` says so. Call it only in a worker thread: `crash`
 * exits the thread (in the main thread it would end the process).
 */
export function strike(fault: HandlerFault | undefined, event: OutboxEvent, attempt: number): void {
  if (!fault || !hits(fault, event, attempt)) return;
  if (fault.kind === 'throw') throw new Error(`injected failure (OUTBOX_HANDLER_FAIL) at attempt ${attempt}`);
  if (fault.kind === 'crash') process.exit(1);
  // hang: blocks in short waits, so that terminating the thread (the timeout) still stops it.
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (;;) Atomics.wait(cell, 0, 0, 50);
}
