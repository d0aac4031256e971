import { OutboxError } from './outbox-error.js';

/** The named order does not exist. Nothing was written. Exit code 3. */
export class NotFoundError extends OutboxError {
  constructor(message: string) {
    super(message, 3);
  }
}
