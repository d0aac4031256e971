import { spawn } from 'node:child_process';
import type { ArgumentsCamelCase, Argv } from 'yargs';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import type { OutboxConfig } from '../../../shared/outbox/config.js';
import { assertNoAttachedApps } from '../../../shared/runtime/attached-apps.js';
import { configOf, ignoreAttachedOption, type GlobalArgs } from '../options.js';
import { refuseOnPostgres, refusePartitioned, withRedis } from '../stores.js';

export const command = 'lab';
export const describe = 'run steps 1-8 of the seed on a clean state (init --force first) and show every artifact';

interface Args extends GlobalArgs {
  ignoreAttached: boolean;
}

export const builder = (yargs: Argv<GlobalArgs>) => yargs.option('ignore-attached', ignoreAttachedOption);

/**
 * relay-crash kills its own process, so it runs as a child of the lab. The settings go through the
 * environment: a password in the Redis URL must not show on a command line (`ps`).
 */
function runRelayCrash(config: OutboxConfig): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [process.argv[1], 'relay-crash'], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, OUTBOX_DIR: config.dir, REDIS_URL: config.redisUrl, OUTBOX_NAMESPACE: config.namespace },
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
  refuseOnPostgres(config, 'lab');
  refusePartitioned(config, 'lab');
  if (!argv.ignoreAttached) assertNoAttachedApps(config.dir);
  console.log(`outbox lab in ${config.dir}`);
  const { runLab } = await import('../../../shared/lab/lab.js');
  const ok = await withRedis(
    config,
    (redis) => runLab(config, redis, { log: (line) => console.log(line), runRelayCrash: () => runRelayCrash(config) }),
    { requireNoEviction: true },
  );
  if (!ok) throw new CheckFailedError('the lab ended with a failed check (see above)');
  console.log('\nlab done: nothing lost, duplicates absorbed, order kept');
}
