import { OutboxError } from './outbox-error.js';

/** A check (order-check, dup-check, verify) ran and found the stores in a state it must report. Exit code 1. */
export class CheckFailedError extends OutboxError {
  constructor(message: string) {
    super(message, 1);
  }
}
