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

async function main(argv: string[]): Promise<void> {
  const cli = yargs(argv)
    .scriptName('outbox')
    .usage('$0 <command> [options]\n\nThe transactional outbox pattern:\n  SQLite (orders + outbox, one transaction) -> relay -> Redis list -> idempotent consumer')
    .options(globalOptions)
    .command(commands)
    .demandCommand(1, 'name a command (see the list above)')
    .recommendCommands()
    .strict()
    .help()
    .alias('h', 'help')
    .version()
    .wrap(Math.min(110, process.stdout.columns || 110))
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
  } else {
    console.error(error);
    process.exitCode = 1;
  }
}
