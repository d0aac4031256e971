import type { ArgumentsCamelCase, Argv } from 'yargs';
import { writeArtifact } from '../../../shared/lab/artifacts.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import type { DualWriteResult, ScratchOrders } from '../../../shared/lab/dualwrite.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withPg, withRedis } from '../stores.js';
import type { OutboxConfig } from '../../../shared/outbox/config.js';

interface Args extends GlobalArgs {
  count: string;
}

export const command = 'dualwrite';
export const describe = 'reproduce the bug: save orders, then publish; the broker drops before the last publish';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs.option('count', { type: 'string', default: '3', describe: 'orders to save; only the last publish fails' });

/** The dual write with its scratch orders: dualwrite.db beside app.db, or a table of its own on PostgreSQL. */
async function run(config: OutboxConfig, count: number): Promise<{ result: DualWriteResult; untouched: string }> {
  const { dualWrite } = await import('../../../shared/lab/dualwrite.js');
  const { pgScratchOrders, sqliteScratchOrders } = await import('../../../shared/lab/dualwrite-stores.js');
  const write = (scratch: ScratchOrders) => withRedis(config, (redis) => dualWrite(scratch, redis, config.redisUrl, count));
  if (!onPostgres(config)) return { result: await write(sqliteScratchOrders(config.dir)), untouched: `scratch store ${config.dir}/dualwrite.db, app.db untouched` };
  const { pgStoreName } = await import('../../../shared/outbox/postgres/pg-store-meta.js');
  return withPg(
    config,
    async (pool) => {
      const scratch = pgScratchOrders(pool, await pgStoreName(pool));
      return { result: await write(scratch), untouched: `scratch ${scratch.name}, the orders and outbox tables untouched` };
    },
    { tables: false },
  );
}

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  const count = parseCount(argv.count, '--count', 1000);
  const { result, untouched } = await run(config, count);
  const path = writeArtifact(config.dir, 'dualwrite.out', result.lines);
  console.log(result.lines.join('\n'));
  console.log(`(written to ${path}; ${untouched})`);
}
