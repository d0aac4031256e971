import { StoreUnavailableError } from '../errors/store-unavailable-error.js';

/** The part of a node-postgres (or socket) error worth one line: its code, then its message. */
export function pgReason(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  const message = (error.message || error.name).split('\n')[0];
  // AggregateError (every address refused): its errors carry the useful words.
  const inner = (error as { errors?: unknown[] }).errors?.[0];
  if (!error.message && inner instanceof Error) return pgReason(inner);
  return typeof code === 'string' && !message.includes(code) ? `${message} (${code})` : message;
}

/** PostgreSQL refused or could not be reached for `what`: a StoreUnavailableError (exit 5) in one line. */
export function pgUnavailable(what: string, error: unknown): StoreUnavailableError {
  return new StoreUnavailableError(`cannot ${what} in PostgreSQL: ${pgReason(error)}`);
}
