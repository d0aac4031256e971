import type { ArgumentsCamelCase, Argv } from 'yargs';
import { assertNoAttachedApps } from '../../../shared/local/attached-apps.js';
import { configOf, ignoreAttachedOption, type GlobalArgs } from '../options.js';
import { withRedis } from '../stores.js';

interface Args extends GlobalArgs {
  force: boolean;
  ignoreAttached: boolean;
}

export const command = 'init';
export const describe = 'create app.db (orders, outbox, partial PENDING index, WAL)';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('force', {
      type: 'boolean',
      default: false,
      describe: "wipe an existing app.db and this project's Redis keys",
    })
    .option('ignore-attached', ignoreAttachedOption);

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  const { assertCanInit, clearProjectKeys, createDatabase } = await import('../../../shared/init-stores.js');
  assertCanInit(config.dir, argv.force);
  if (argv.force) {
    if (!argv.ignoreAttached) assertNoAttachedApps(config.dir);
    // Connected first: if Redis is unreachable, the database is left as it was. The new database
    // comes before the keys are cleared, so a relay still holding the old file cannot claim the
    // emptied Redis for the old store in between (it checks its file is still app.db first).
    await withRedis(config, async (redis) => {
      console.log(`created ${createDatabase(config.dir)}`);
      console.log(`cleared ${await clearProjectKeys(redis)} Redis keys of this project`);
    });
    return;
  }
  console.log(`created ${createDatabase(config.dir)}`);
}
