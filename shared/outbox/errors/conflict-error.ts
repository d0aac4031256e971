import { OutboxError } from './outbox-error.js';

/** The request is valid but the current state forbids it (cancelling twice, wiping without --force). Exit code 4. */
export class ConflictError extends OutboxError {
  constructor(message: string) {
    super(message, 4);
  }
}
