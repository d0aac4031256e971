import type { ArgumentsCamelCase, Argv } from 'yargs';
import { databasePath } from '../../../shared/outbox/config.js';
import type { WipePlan } from '../../../shared/lab/init-stores.js';
import { assertNoAttachedApps } from '../../../shared/runtime/attached-apps.js';
import { guard, guardOptions, SHOWN, withMore, type GuardArgs } from '../confirm.js';
import { configOf, ignoreAttachedOption, type GlobalArgs } from '../options.js';
import { onPostgres, refuseDbPath, withPartitions, withPg } from '../stores.js';
import type { OutboxConfig } from '../../../shared/outbox/config.js';
import { ConflictError } from '../../../shared/outbox/errors/conflict-error.js';

interface Args extends GlobalArgs, GuardArgs {
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
    .option('ignore-attached', ignoreAttachedOption)
    .options(guardOptions);

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  refuseDbPath(config, 'init');
  if (onPostgres(config)) return initPostgres(config, argv);
  const { assertCanInit, createDatabase, planWipe } = await import('../../../shared/lab/init-stores.js');
  const { clearProjectKeys } = await import('../../../shared/outbox/redis/project-keys.js');
  assertCanInit(config.dir, argv.force);
  if (argv.force) {
    if (!argv.ignoreAttached) assertNoAttachedApps(config.dir);
    // Connected first: if Redis is unreachable, the database is left as it was. The new database
    // comes before the keys are cleared, so a relay still holding the old file cannot claim the
    // emptied Redis for the old store in between (it checks its file is still app.db first).
    await withPartitions(config, async (partitions) => {
      const plan = await planWipe(config.dir, partitions, SHOWN);
      const goOn = await guard(argv, {
        command: 'init --force',
        change: `${describeWipe(databasePath(config.dir), plan)} and create a new, empty app.db`,
        size: wipeSize(plan),
        shown: withMore(plan.firstKeys.map((key) => `key ${key}`), plan.keys),
      });
      if (!goOn) return;
      console.log(`created ${createDatabase(config.dir)}`);
      console.log(`cleared ${await clearProjectKeys(partitions)} Redis keys of this project`);
    });
    return;
  }
  if (argv.dryRun) return void console.log(`init would create ${databasePath(config.dir)}\ndry run: nothing changed`);
  console.log(`created ${createDatabase(config.dir)}`);
}

/**
 * The same on PostgreSQL: the lab's orders table and the library's tables in the database of
 * --database / OUTBOX_DATABASE_URL (its current schema). Refuses a database that has them unless
 * --force, which drops them (nothing else of the database) and clears this project's Redis keys,
 * and refuses while an app has the store open (pg-attached-apps.ts) unless --ignore-attached.
 */
async function initPostgres(config: OutboxConfig, argv: ArgumentsCamelCase<Args>): Promise<void> {
  const { createPgLabSchema, recreatePgLabSchema, pgLabRows } = await import('../../../shared/lab/orders/pg-order-service.js');
  const { pgStoreName } = await import('../../../shared/outbox/postgres/pg-store-meta.js');
  const { planWipe } = await import('../../../shared/lab/init-stores.js');
  const { clearProjectKeys } = await import('../../../shared/outbox/redis/project-keys.js');
  await withPg(
    config,
    async (pool) => {
      const name = await pgStoreName(pool);
      const rows = await pgLabRows(pool);
      if (rows !== null && !argv.force) {
        throw new ConflictError(`${name} already has the outbox tables: pass --force to drop them and start over (this deletes every order and event)`);
      }
      const created = `created the orders and outbox tables in ${name}`;
      if (argv.force && !argv.ignoreAttached) {
        const { assertNoPgAttachedApps } = await import('../../../shared/runtime/pg-attached-apps.js');
        await assertNoPgAttachedApps(pool);
      }
      if (!argv.force) {
        if (argv.dryRun) return void console.log(`init would create the orders and outbox tables in ${name}\ndry run: nothing changed`);
        await createPgLabSchema(pool);
        return void console.log(created);
      }
      // Connected first: if Redis is unreachable, the database is left as it was.
      await withPartitions(config, async (partitions) => {
        const plan = await planWipe(config.dir, partitions, SHOWN, rows);
        const goOn = await guard(argv, {
          command: 'init --force',
          change: `${describeWipe(`the outbox tables of ${name}`, plan)} and create new, empty ones`,
          size: wipeSize(plan),
          shown: withMore(plan.firstKeys.map((key) => `key ${key}`), plan.keys),
        });
        if (!goOn) return;
        await recreatePgLabSchema(pool);
        console.log(created);
        console.log(`cleared ${await clearProjectKeys(partitions)} Redis keys of this project`);
      });
    },
    { tables: false },
  );
}

function describeWipe(path: string, { rows, keys }: WipePlan): string {
  const database =
    rows === null
      ? `find no ${path} to delete`
      : rows === 'unreadable'
        ? `delete ${path} (not a readable outbox database)`
        : `delete ${path} with ${rows.orders} order(s), ${rows.outbox} outbox row(s) and ${rows.outbox_pruned} pruned-aggregate record(s)`;
  return `${database}, delete ${keys} Redis key(s) of this deployment`;
}

/** Rows and keys deleted; an unreadable app.db counts as more than a handful. */
function wipeSize({ rows, keys }: WipePlan): number {
  if (rows === 'unreadable') return Number.MAX_SAFE_INTEGER;
  return keys + (rows === null ? 0 : rows.orders + rows.outbox + rows.outbox_pruned);
}
