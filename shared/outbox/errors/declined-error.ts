import { OutboxError } from './outbox-error.js';

/** The operator answered no (or nothing: end of input, Ctrl-C) when asked to confirm a change. Nothing was changed. Exit code 6. */
export class DeclinedError extends OutboxError {
  constructor(message: string) {
    super(message, 6);
  }
}
