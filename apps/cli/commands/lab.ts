import { spawn } from 'node:child_process';
import type { ArgumentsCamelCase, Argv } from 'yargs';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import type { OutboxConfig } from '../../../shared/outbox/config.js';
import { assertNoAttachedApps } from '../../../shared/runtime/attached-apps.js';
import { configOf, ignoreAttachedOption, type GlobalArgs } from '../options.js';
import { onPostgres, refuseDbPath, refusePartitioned, withPg, withRedis } from '../stores.js';
import type { LabStore } from '../../../shared/lab/lab-store.js';

export const command = 'lab';
export const describe = 'run steps 1-8 of the seed on a clean state (init --force first) and show every artifact';

interface Args extends GlobalArgs {
  ignoreAttached: boolean;
}

export const builder = (yargs: Argv<GlobalArgs>) => yargs.option('ignore-attached', ignoreAttachedOption);

/**
 * relay-crash kills its own process, so it runs as a child of the lab, on the lab's store. The
 * settings go through the environment: a password in a URL must not show on a command line (`ps`).
 */
function runRelayCrash(config: OutboxConfig): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [process.argv[1], 'relay-crash'], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, OUTBOX_DIR: config.dir, REDIS_URL: config.redisUrl, OUTBOX_NAMESPACE: config.namespace, OUTBOX_DATABASE_URL: config.databaseUrl ?? '' },
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL') resolve();
      else reject(new Error(`relay-crash should have died at its crash point, but exited with ${signal ?? code}`));
    });
  });
}

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  // The seed's steps on one Redis: the artifacts name its keys.
  refusePartitioned(config, 'lab');
  refuseDbPath(config, 'lab');
  const { runLab } = await import('../../../shared/lab/lab.js');
  const { pgLabStore, sqliteLabStore } = await import('../../../shared/lab/lab-store.js');
  const run = (store: LabStore) =>
    withRedis(config, (redis) => runLab(config, store, redis, { log: (line) => console.log(line), runRelayCrash: () => runRelayCrash(config) }), {
      requireNoEviction: true,
    });
  let ok: boolean;
  if (onPostgres(config)) {
    ok = await withPg(
      config,
      async (pool) => {
        if (!argv.ignoreAttached) {
          const { assertNoPgAttachedApps } = await import('../../../shared/runtime/pg-attached-apps.js');
          await assertNoPgAttachedApps(pool);
        }
        const { pgStoreName } = await import('../../../shared/outbox/postgres/pg-store-meta.js');
        console.log(`outbox lab in ${config.dir}, the store in ${await pgStoreName(pool)}`);
        return run(pgLabStore(pool));
      },
      { tables: false },
    );
  } else {
    if (!argv.ignoreAttached) assertNoAttachedApps(config.dir);
    console.log(`outbox lab in ${config.dir}`);
    ok = await run(sqliteLabStore(config));
  }
  if (!ok) throw new CheckFailedError('the lab ended with a failed check (see above)');
  console.log('\nlab done: nothing lost, duplicates absorbed, order kept');
}
