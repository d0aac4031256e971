import { OutboxError } from './outbox-error.js';

/** The caller gave a value the contract does not accept. Nothing was written. Exit code 2. */
export class InvalidInputError extends OutboxError {
  constructor(message: string) {
    super(message, 2);
  }
}
