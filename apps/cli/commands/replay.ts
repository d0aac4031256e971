import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseReplayRange, replay } from '../../../shared/recovery/repair.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withDb } from '../stores.js';

interface Args extends GlobalArgs {
  from: string;
  to?: string;
}

export const command = 'replay';
export const describe = 'set a range of PUBLISHED rows back to PENDING so the relay publishes them again';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('from', { type: 'string', demandOption: true, describe: 'first row id, or a time (ISO 8601) of created_at' })
    .option('to', { type: 'string', describe: 'last row id or time (default: the newest)' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const range = parseReplayRange(argv.from, argv.to);
  const count = await withDb(configOf(argv), (db) => replay(db, range));
  console.log(`${count} row(s) set back to PENDING; the relay (outbox relay, or the outbox-relay app) publishes them again and the consumer skips what it already applied`);
}
