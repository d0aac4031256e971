import { OutboxError } from './outbox-error.js';

/** SQLite or Redis cannot be used as it is: missing, corrupt, unreachable or too old. Exit code 5. */
export class StoreUnavailableError extends OutboxError {
  constructor(message: string) {
    super(message, 5);
  }
}
