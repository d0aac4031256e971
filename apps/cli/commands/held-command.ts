import type { ArgumentsCamelCase, Argv } from 'yargs';
import {
  assertAllDone,
  dropHeld,
  listHeld,
  retryHeld,
  selectHeld,
  selectStaleDeadLetters,
  type HeldKind,
  type HeldMessage,
} from '../../../shared/operations/recovery/held-messages.js';
import { InvalidInputError } from '../../../shared/outbox/errors/invalid-input-error.js';
import { guard, guardOptions, SHOWN, withMore, type GuardArgs } from '../confirm.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withPartitions } from '../stores.js';

export interface Args extends GlobalArgs, GuardArgs {
  action: 'list' | 'retry' | 'drop';
  id: string[];
  all: boolean;
  stale: boolean;
  json: boolean;
}

/** `outbox dead-letter …` and `outbox parked …`: the same three actions on the two holding places. */
export function heldCommand(kind: HeldKind, what: string, idHelp: string, retryHelp: string) {
  return {
    command: `${kind} <action>`,
    describe: `list, retry or drop ${what}`,
    builder: (yargs: Argv<GlobalArgs>) =>
      yargs
        .positional('action', { choices: ['list', 'retry', 'drop'] as const, describe: `list; retry: ${retryHelp}; drop: delete for good` })
        .option('id', { type: 'string', array: true, default: [] as string[], describe: idHelp })
        .option('all', { type: 'boolean', default: false, describe: 'every entry' })
        .option('stale', { type: 'boolean', default: false, describe: 'dead-letter drop: the entries whose event Redis has applied since (a wipe leaves such)' })
        .option('json', { type: 'boolean', default: false, describe: 'list as JSON' })
        .options(guardOptions),
    async handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
      await withPartitions(configOf(argv), async (partitions) => {
        if (argv.action === 'list') {
          const held = await listHeld(partitions, kind);
          if (argv.json) return console.log(JSON.stringify(held.map(({ handle: _, ...h }) => h), null, 2));
          if (held.length === 0) return console.log(`no ${what}`);
          for (const h of held) console.log(heldLine(h));
          return;
        }
        if (argv.stale && (kind !== 'dead-letter' || argv.action !== 'drop')) throw new InvalidInputError('--stale goes with "outbox dead-letter drop"');
        const held = argv.stale ? await selectStaleDeadLetters(partitions) : await selectHeld(partitions, kind, argv.id, argv.all);
        if (argv.stale && held.length === 0) return console.log('no stale dead-letter entries');
        const goOn = await guard(argv, {
          command: `${kind} ${argv.action}`,
          change: argv.action === 'retry' ? `put ${held.length} ${kind} entr(ies) back on outbox.events` : `drop ${held.length} ${kind} entr(ies) for good`,
          // A retry loses nothing: only a drop is asked about.
          size: argv.action === 'drop' ? held.length : 0,
          shown: withMore(held.slice(0, SHOWN).map(heldLine), held.length),
        });
        if (!goOn) return;
        if (argv.action === 'retry') {
          const result = await retryHeld(partitions, kind, held);
          console.log(`${result.done} ${kind} entr(ies) put back on outbox.events`);
          assertAllDone(kind, 'retry', held.length, result);
        } else {
          const result = await dropHeld(partitions, kind, held);
          console.log(`${result.done} ${kind} entr(ies) dropped${argv.stale ? ' (stale: their events are applied)' : ''}`);
          assertAllDone(kind, 'drop', held.length, result);
        }
      });
    },
  };
}

function heldLine(h: HeldMessage): string {
  const partition = h.partition === undefined ? '' : `  partition ${h.partition}`;
  return `${h.id}${partition}  ${new Date(h.at).toISOString()}  ${h.reason}  ${h.message.slice(0, 120)}`;
}
