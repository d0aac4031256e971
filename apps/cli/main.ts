#!/usr/bin/env node
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { OutboxError } from '../../shared/errors/outbox-error.js';
import { InvalidInputError } from '../../shared/errors/invalid-input-error.js';
import { commands } from './commands/index.js';
import { globalOptions } from './options.js';

/** Connection errors that escape a command (Redis went away mid-run) are expected, not bugs. */
function isConnectionError(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND'].includes(code ?? '') ||
    /Connection is closed|Stream isn't writeable|Reached the max retries/.test(message ?? '')
  );
}

/**
 * The key a WRONGTYPE reply is about: something other than outbox wrote one of its keys with another
 * type (a hash made a string, say). Null for any other error. Keys of a Lua script are not named.
 */
function wrongTypeKey(error: unknown): string | null {
  const { message, command } = (error ?? {}) as { message?: string; command?: { name?: string; args?: unknown[] } };
  if (!/^WRONGTYPE/.test(message ?? '')) return null;
  const name = command?.name ?? '';
  return /^eval/i.test(name) ? 'one of the keys of a Lua script' : `key ${String(command?.args?.[0] ?? '?')}`;
}

async function main(argv: string[]): Promise<void> {
  const cli = yargs(argv)
    .scriptName('outbox')
    .wrap(null)
    .usage('$0 <command> [options]')
    .epilogue(
      [
        'The transactional outbox pattern: an order and the intent to publish its event are written',
        'in one SQLite transaction; a relay moves pending events onto the Redis list outbox.events;',
        'an idempotent consumer absorbs the duplicates that at-least-once delivery produces.',
        'Start with "outbox lab".',
      ].join('\n'),
    )
    .options(globalOptions)
    .command(commands)
    .demandCommand(1, 'name a command')
    .strict()
    .help()
    .alias('h', 'help')
    .version()
    .fail((message, error) => {
      if (error) throw error;
      throw new InvalidInputError(`${message} (see "outbox --help")`);
    });
  await cli.parseAsync();
}

try {
  await main(hideBin(process.argv));
} catch (error) {
  if (error instanceof OutboxError) {
    console.error(`outbox: ${error.message}`);
    process.exitCode = error.exitCode;
  } else if (isConnectionError(error)) {
    console.error(`outbox: lost the connection to Redis (${(error as Error).message}): run the command again once Redis is back (every step is safe to repeat)`);
    process.exitCode = 5;
  } else if (wrongTypeKey(error) !== null) {
    console.error(
      `outbox: Redis ${wrongTypeKey(error)} holds another type than outbox keeps there (something else wrote it): ` +
        'move it away (RENAME) and run outbox verify; if another program shares this Redis, give outbox its own --namespace',
    );
    process.exitCode = 5;
  } else {
    console.error(error);
    process.exitCode = 1;
  }
}
