import type { ArgumentsCamelCase, Argv } from 'yargs';
import { describeRefusal, readRefusals } from '../../../shared/runtime/refusals.js';
import { collectStatus, formatStatus } from '../../../shared/operations/status.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withDb, withRedis } from '../stores.js';

interface Args extends GlobalArgs {
  json: boolean;
}

export const command = 'status';
export const describe = 'one screen: pending rows, queue, processing lists, processed, parked, dead letters, relay, apps that refused to start';

export const builder = (yargs: Argv<GlobalArgs>) => yargs.option('json', { type: 'boolean', default: false, describe: 'print JSON' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  // Not withStores: a Redis that serves another store is shown here, not refused.
  const config = configOf(argv);
  const status = await withDb(config, (db) => withRedis(config, (redis) => collectStatus(db, redis)));
  // Apps that exited with EXIT_CONFIG (pm2 shows them stopped): why, from <dir>/refused/.
  const refused = readRefusals(config.dir);
  if (argv.json) console.log(JSON.stringify({ ...status, refused }, null, 2));
  else console.log([...formatStatus(status), ...refused.map((refusal) => `REFUSED     ${describeRefusal(refusal)}`)].join('\n'));
}
