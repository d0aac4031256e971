import { InvalidInputError } from './invalid-input-error.js';
import { OutboxError } from './outbox-error.js';
import { StoreUnavailableError } from './store-unavailable-error.js';
import { sqliteBusyCode } from '../store/sqlite-busy.js';

/** Connection errors that escape a command (Redis went away mid-run) are expected, not bugs. */
export function isConnectionError(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND'].includes(code ?? '') ||
    /Connection is closed|Stream isn't writeable|Reached the max retries/.test(message ?? '')
  );
}

/**
 * What a WRONGTYPE reply is about: something other than outbox wrote one of its keys with another
 * type (a hash made a string, say). Null for any other error. For a Lua script, the keys it was given.
 */
function wrongTypeKey(error: unknown): string | null {
  const { message, command } = (error ?? {}) as { message?: string; command?: { name?: string; args?: unknown[] } };
  if (!/^WRONGTYPE/.test(message ?? '')) return null;
  const args = command?.args ?? [];
  if (!/^eval/i.test(command?.name ?? '')) return `key ${String(args[0] ?? '?')}`;
  const keys = args.slice(2, 2 + Number(args[1] ?? 0)).map(String);
  return keys.length > 0 ? `one of the keys ${keys.join(', ')}` : 'one of the keys of a Lua script';
}

/**
 * The one-line `OutboxError` an expected failure stands for (the CLI prints it, the apps log it),
 * or null for a bug, which keeps its stack. An `OutboxError` is returned as it is.
 */
export function explainError(error: unknown): OutboxError | null {
  if (error instanceof OutboxError) return error;
  const { name, code: rawCode, message } = (error ?? {}) as { name?: string; code?: unknown; message?: string };
  // Not every library's code is a string (BullMQ's lock errors carry numbers).
  const code = typeof rawCode === 'string' ? rawCode : undefined;
  // yargs's own validation (an option without its value, say).
  if (name === 'YError') return new InvalidInputError(`${message} (see "outbox --help")`);
  if (isConnectionError(error)) {
    return new StoreUnavailableError(
      `lost the connection to Redis (${message}): run the command again once Redis is back (every step is safe to repeat)`,
    );
  }
  const wrongType = wrongTypeKey(error);
  if (wrongType !== null) {
    return new StoreUnavailableError(
      `Redis ${wrongType} holds another type than outbox keeps there (something else wrote it): ` +
        'move it away (RENAME) and run outbox verify; if another program shares this Redis, give outbox its own --namespace',
    );
  }
  const busy = sqliteBusyCode(error);
  if (busy) return new StoreUnavailableError(`app.db is locked by another writer (${busy}): try again`);
  if (code === 'SQLITE_FULL') return new StoreUnavailableError(`app.db's disk is full (${code}): free some space and try again`);
  return null;
}
