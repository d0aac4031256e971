import type { ArgumentsCamelCase, Argv } from 'yargs';
import { writeArtifact } from '../../../shared/lab/artifacts.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withRedis } from '../stores.js';

interface Args extends GlobalArgs {
  count: string;
}

export const command = 'dualwrite';
export const describe = 'reproduce the bug: save orders, then publish; the broker drops before the last publish';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs.option('count', { type: 'string', default: '3', describe: 'orders to save; only the last publish fails' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  const count = parseCount(argv.count, '--count', 1000);
  const { dualWrite } = await import('../../../shared/lab/dualwrite.js');
  const result = await withRedis(config, (redis) => dualWrite(config.dir, redis, config.redisUrl, count));
  const path = writeArtifact(config.dir, 'dualwrite.out', result.lines);
  console.log(result.lines.join('\n'));
  console.log(`(written to ${path}; scratch store ${config.dir}/dualwrite.db, app.db untouched)`);
}
