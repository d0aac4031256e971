import { OutboxError } from './outbox-error.js';

/**
 * The store and Redis cannot be paired: Redis serves another store (`StoreMismatchError`), or the
 * store is behind the Redis that serves it (`StoreBehindError`). A relay pushes nothing while it
 * holds; the relay apps log it and wait. Exit code 5.
 */
export class StoreRefusedError extends OutboxError {
  constructor(message: string) {
    super(message, 5);
  }
}
