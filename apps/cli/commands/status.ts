import type { ArgumentsCamelCase, Argv } from 'yargs';
import { collectStatus, formatStatus } from '../../../shared/status.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withDb, withRedis } from '../stores.js';

interface Args extends GlobalArgs {
  json: boolean;
}

export const command = 'status';
export const describe = 'one screen: pending rows, queue, processing lists, processed, parked, dead letters, relay';

export const builder = (yargs: Argv<GlobalArgs>) => yargs.option('json', { type: 'boolean', default: false, describe: 'print JSON' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  // Not withStores: a Redis that serves another store is shown here, not refused.
  const config = configOf(argv);
  const status = await withDb(config, (db) => withRedis(config, (redis) => collectStatus(db, redis)));
  console.log(argv.json ? JSON.stringify(status, null, 2) : formatStatus(status).join('\n'));
}
