import type { CommandModule } from 'yargs';

/**
 * Every command, in the order of the seed's steps (as `outbox --help` lists them), by the name that
 * starts its `command` string, with the import that loads it.
 *
 * A command module imports at top level only what defines and checks its options; code that loads
 * ioredis or better-sqlite3 (the stores, through ../stores.ts, or a module such as shared/lab/lab.ts) is
 * imported when the handler runs. That keeps `outbox --help` and a rejected argument fast;
 * test/cli.test.ts fails if one of them loads a store library, bullmq, piscina or pm2.
 */
const COMMANDS = {
  init: () => import('./init.js'),
  dualwrite: () => import('./dualwrite.js'),
  'place-order': () => import('./place-order.js'),
  'change-qty': () => import('./change-qty.js'),
  'cancel-order': () => import('./cancel-order.js'),
  relay: () => import('./relay.js'),
  'order-check': () => import('./order-check.js'),
  'relay-crash': () => import('./relay-crash.js'),
  'dup-check': () => import('./dup-check.js'),
  consume: () => import('./consume.js'),
  report: () => import('./report.js'),
  verify: () => import('./verify.js'),
  status: () => import('./status.js'),
  replay: () => import('./replay.js'),
  'dead-letter': () => import('./dead-letter.js'),
  parked: () => import('./parked.js'),
  prune: () => import('./prune.js'),
  chaos: () => import('./chaos.js'),
  bench: () => import('./bench.js'),
  lab: () => import('./lab.js'),
  redis: () => import('./redis.js'),
} satisfies Record<string, () => Promise<unknown>>;

export const COMMAND_NAMES = Object.keys(COMMANDS) as (keyof typeof COMMANDS)[];

/** The command an argument list names: its first word that is not an option nor the value of `valueOptions`. */
export function commandNamed(args: string[], valueOptions: string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--') return undefined;
    if (!arg.startsWith('-')) return arg;
    if (!arg.includes('=') && valueOptions.includes(arg.replace(/^--?/, ''))) i++;
  }
  return undefined;
}

/**
 * The command modules `outbox <args>` needs: only the one it names (loading the other twenty costs
 * about 45 ms of every command's start-up), or every one for `outbox --help`, no command, or a name
 * that is not a command (yargs then lists them all in its error).
 */
export async function commandsFor(args: string[], valueOptions: string[]): Promise<CommandModule[]> {
  const name = commandNamed(args, valueOptions);
  const names = name !== undefined && name in COMMANDS ? [name as keyof typeof COMMANDS] : COMMAND_NAMES;
  return (await Promise.all(names.map((n) => COMMANDS[n]()))) as unknown as CommandModule[];
}
