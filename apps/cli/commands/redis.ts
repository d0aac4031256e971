import type { ArgumentsCamelCase, Argv } from 'yargs';
import { ConflictError } from '../../../shared/outbox/errors/conflict-error.js';
import {
  ensureManagedRedis,
  forgetManagedOwner,
  MANAGED_HOST,
  managedOwnerOf,
  managedRedisDir,
  managedRedisState,
  managedTarget,
  managedRedisUrl,
  redisAnswers,
  stopManagedRedis,
} from '../../../shared/tooling/local/managed-redis.js';
import { attachedApps } from '../../../shared/runtime/attached-apps.js';
import { configOf, ignoreAttachedOption, type GlobalArgs } from '../options.js';

interface Args extends GlobalArgs {
  action: 'start' | 'stop' | 'status';
  ignoreAttached: boolean;
}

export const command = 'redis <action>';
export const describe = 'the managed Redis (<dir>/redis, started by outbox when the default URL finds none): start, stop or status';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .positional('action', {
      choices: ['start', 'stop', 'status'] as const,
      describe: 'start: start it unless something listens on its port; stop: stop it (its data stays); status: exit 0 when it runs, 3 when not',
    })
    .option('ignore-attached', { ...ignoreAttachedOption, describe: 'stop it even while apps (the relay) use it' });

/** Exit code of `outbox redis status` when the managed Redis does not run (docs/cli.md, "Exit codes and errors"). */
const NOT_RUNNING = 3;

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const { dir } = configOf(argv);
  // The managed Redis's port: OUTBOX_REDIS_PORT, or the one it moved to beside a Redis outbox did not start there.
  const { port, from } = managedTarget(dir);
  // The managed Redis that holds the port, whichever data dir it was started for; else this dir's.
  const serving = managedOwnerOf(port) ?? dir;
  const data = managedRedisDir(serving);
  const running = managedRedisState(serving);
  const forOther = serving === dir ? '' : ` (started for the data dir ${serving})`;
  const elsewhere = async () =>
    (await redisAnswers(from ?? port)) ? `; the Redis on ${MANAGED_HOST}:${from ?? port} is not one outbox started: left alone` : '';

  if (argv.action === 'start') {
    if (running.state === 'running') return console.log(`redis-server already runs on ${MANAGED_HOST}:${running.port ?? port} (pid ${running.pid}; data in ${data})${forOther}`);
    const started = await ensureManagedRedis(dir, managedRedisUrl(dir));
    const leftAlone = started.leftAlone === undefined ? '' : `; a Redis outbox did not start listens on ${MANAGED_HOST}:${started.leftAlone}: left alone`;
    console.log(
      started.started
        ? `started redis-server on ${MANAGED_HOST}:${started.port} (data in ${managedRedisDir(dir)})${leftAlone}`
        : `something already listens on ${MANAGED_HOST}:${port}: no redis-server started`,
    );
  } else if (argv.action === 'stop') {
    if (running.state === 'stopped') return console.log(`no redis-server started by outbox runs on ${MANAGED_HOST}:${port}: nothing to stop${await elsewhere()}`);
    if (running.underPm2) {
      throw new ConflictError(`redis-server (pid ${running.pid}) runs under pm2 as outbox-redis, which would start it again: stop it with "npx pm2 stop outbox-redis"`);
    }
    // The relay registers itself on its data dir while it runs; stopping its Redis under it leaves it
    // retrying (and pm2 showing it online) until something starts Redis again.
    const users = attachedApps(serving).filter((app) => app.app === 'outbox-relay');
    if (users.length > 0 && !argv.ignoreAttached) {
      const which = users.map((app) => `${app.app} (pid ${app.pid})`).join(', ');
      throw new ConflictError(`${which} uses this Redis: stop the apps first ("npx pm2 stop ecosystem.config.cjs"), or pass --ignore-attached`);
    }
    await stopManagedRedis(running.pid);
    forgetManagedOwner(serving, running.port ?? port);
    console.log(`stopped redis-server on ${MANAGED_HOST}:${running.port ?? port} (pid ${running.pid}); its data stays in ${data}${forOther}`);
  } else if (running.state === 'running') {
    const by = running.underPm2 ? 'under pm2 as outbox-redis' : 'started by outbox';
    console.log(`redis-server runs on ${MANAGED_HOST}:${running.port ?? port} (pid ${running.pid}, ${by}; data and password in ${data})${forOther}`);
  } else {
    console.log(`no redis-server started by outbox runs on ${MANAGED_HOST}:${port}${await elsewhere()}`);
    process.exitCode = NOT_RUNNING;
  }
}
