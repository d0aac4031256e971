import { createInterface } from 'node:readline';
import type { Options } from 'yargs';
import { DeclinedError } from '../../shared/outbox/errors/declined-error.js';
import type { RowToChange } from '../../shared/operations/recovery/repair.js';

/** A change of more rows (or entries, or keys) than this is asked about on a terminal. */
export const ASK_ABOVE = 10;

/** Rows shown by a dry run and before the question. */
export const SHOWN = 5;

/** `--dry-run` and `--yes`, defined once for the commands that delete or reset what they cannot undo. */
export const guardOptions = {
  'dry-run': { type: 'boolean', default: false, describe: 'print what would change (counts and the first rows) and change nothing' },
  yes: {
    type: 'boolean',
    default: false,
    describe: `do not ask before changing more than ${ASK_ABOVE} rows on a terminal (without a terminal nothing is asked)`,
  },
} satisfies Record<string, Options>;

export interface GuardArgs {
  dryRun: boolean;
  yes: boolean;
}

/** What a guarded command is about to do. */
export interface Plan {
  /** The command as typed, e.g. "replay", "dead-letter drop". */
  command: string;
  /** The change, read after "would" (dry run) and "will" (question): "set 12 PUBLISHED row(s) (ids 1-12) back to PENDING". */
  change: string;
  /** How many rows, entries or keys it changes: compared with ASK_ABOVE. */
  size: number;
  /** The first rows it changes, one line each. */
  shown?: string[];
}

/** A question can be asked and answered only when both stdin and stdout are a terminal. */
function onTerminal(): boolean {
  return process.stdin.isTTY === true && process.stdout.isTTY === true;
}

/**
 * Whether `guard` may ask: commands whose plan costs a pass over the data (prune) compute it only
 * for a dry run or when this is true.
 */
export function mayAsk(argv: GuardArgs): boolean {
  return !argv.yes && onTerminal();
}

/**
 * Resolves true when the command should go ahead. A dry run prints the plan and resolves false.
 * On a terminal without --yes, a change larger than ASK_ABOVE is asked about; anything but "y" or
 * "yes" throws DeclinedError (exit 6) before anything changed. Without a terminal (scripts, cron,
 * pm2, the tests) nothing is asked and the command goes ahead, as it always did: a script cannot
 * answer, and one that must not change much runs --dry-run first.
 */
export async function guard(argv: GuardArgs, plan: Plan): Promise<boolean> {
  const shown = plan.shown ?? [];
  if (argv.dryRun) {
    console.log(`${plan.command} would ${plan.change}`);
    for (const line of shown) console.log(`  ${line}`);
    console.log('dry run: nothing changed');
    return false;
  }
  if (plan.size <= ASK_ABOVE || !mayAsk(argv)) return true;
  for (const line of shown) console.log(`  ${line}`);
  const answer = await ask(`${plan.command} will ${plan.change}. Go on? [y/N] `);
  if (/^y(es)?$/i.test(answer.trim())) return true;
  throw new DeclinedError(`${plan.command} cancelled: nothing changed (pass --yes to go ahead without the question)`);
}

/** One line from the terminal; end of input or Ctrl-C answers "". */
function ask(question: string): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  return new Promise((resolve) => {
    let answered = false;
    const finish = (answer: string) => {
      if (answered) return;
      answered = true;
      rl.close();
      resolve(answer);
    };
    rl.on('close', () => finish(''));
    rl.on('SIGINT', () => {
      process.stdout.write('\n');
      finish('');
    });
    rl.question(question, finish);
  });
}

/** "ids 1-12", or "id 7": the id range of a change. */
export function idRange(first: number, last: number): string {
  return first === last ? `id ${first}` : `ids ${first}-${last}`;
}

/** "… and 12 more" after the shown lines, when there are more. */
export function withMore(lines: string[], total: number): string[] {
  return total > lines.length ? [...lines, `… and ${total - lines.length} more`] : lines;
}

/** An outbox row as a dry run and a question show it. */
export function rowLine(row: RowToChange): string {
  return `id ${row.id}  ${row.aggregate_id} seq ${row.seq}  ${row.event_type}  created ${new Date(row.created_at).toISOString()}  event ${row.event_id}`;
}
