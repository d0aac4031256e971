import { createRequire } from 'node:module';
import type { Argv } from 'yargs';
import { InvalidInputError } from '../../shared/outbox/errors/invalid-input-error.js';
import { commandsFor } from './commands/index.js';
import { globalOptions } from './options.js';

// yargs's CommonJS build is one bundled file; its ESM build is a dozen modules that node's ESM loader
// resolves and links one by one: about 20 ms more of every command's start-up on this machine.
const require = createRequire(import.meta.url);
const yargs = require('yargs/yargs') as (args: string[]) => Argv;

/**
 * The `outbox` command line for `argv`, defined but not parsed: main.ts parses and runs it, and
 * the CLI reference (docs/reference/cli.md, shared/tooling/docs/cli-reference.ts) is its help text.
 */
export async function cliFor(argv: string[]): Promise<Argv> {
  return yargs(argv)
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
    .command(await commandsFor(argv, Object.keys(globalOptions)))
    .demandCommand(1, 'name a command')
    .strict()
    .help()
    .alias('h', 'help')
    .version()
    .fail((message, error) => {
      if (error) throw error;
      throw new InvalidInputError(`${message} (see "outbox --help")`);
    });
}
