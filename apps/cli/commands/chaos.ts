import { writeFileSync } from 'node:fs';
import { configOf } from '../options.js';
import { refuseOnPostgres, refusePartitioned } from '../stores.js';
import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseDuration } from '../../../shared/outbox/duration.js';
import { formatChaos } from '../../../shared/tooling/chaos/format-chaos.js';
import { CHAOS_TARGETS, DEFAULT_CHAOS_TARGETS, type ChaosTarget } from '../../../shared/tooling/chaos/targets.js';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import { InvalidInputError } from '../../../shared/outbox/errors/invalid-input-error.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import type { GlobalArgs } from '../options.js';

interface Args extends GlobalArgs {
  duration: string;
  rate: string;
  killEvery: string;
  targets: string;
  seed: string;
  json?: string;
  keep: boolean;
}

export const command = 'chaos';
export const describe = 'run the apps under pm2 with faults injected, then prove nothing was lost, doubled or reordered';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('duration', { type: 'string', default: '60s', describe: 'how long traffic runs and faults are injected' })
    .option('rate', { type: 'string', default: '500', describe: 'order operations per second' })
    .option('kill-every', { type: 'string', default: '2s', describe: 'mean time between faults' })
    .option('targets', {
      type: 'string',
      default: DEFAULT_CHAOS_TARGETS.join(','),
      describe: `what to hit, from ${CHAOS_TARGETS.join(',')} (redis-wipe: Redis restarts without its data; prune: prune --older-than 1s; pause: SIGSTOP a relay or the consumer; ` +
        `sqlite-lock: app.db's write lock held; handler-fail: every handler attempt fails for a while)`,
    })
    .option('seed', { type: 'string', default: '1', describe: 'seed of the fault schedule and the traffic (same seed, same schedule)' })
    .option('json', { type: 'string', describe: 'also write the figures as JSON to this file' })
    .option('keep', { type: 'boolean', default: false, describe: 'keep the workspace (data, logs, Redis files) for a look afterwards' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  // Its own workspace on app.db; the apps it starts would read OUTBOX_DATABASE_URL.
  refuseOnPostgres(configOf(argv), 'chaos');
  // Its own workspace, one Redis: the apps it starts would read OUTBOX_PARTITIONS / OUTBOX_REDIS_CLUSTER.
  refusePartitioned(configOf(argv), 'chaos');
  const targets = argv.targets.split(',').map((t) => t.trim()) as ChaosTarget[];
  const unknown = targets.filter((t) => !CHAOS_TARGETS.includes(t));
  if (unknown.length > 0 || targets.length === 0) {
    throw new InvalidInputError(`--targets takes a comma-separated list of ${CHAOS_TARGETS.join(', ')}, got ${JSON.stringify(argv.targets)}`);
  }
  const options = {
    durationMs: parseDuration(argv.duration, '--duration'),
    rate: parseCount(argv.rate, '--rate', 100_000),
    killEveryMs: parseDuration(argv.killEvery, '--kill-every'),
    targets,
    seed: parseCount(argv.seed, '--seed', 2 ** 31),
    keep: argv.keep,
  };
  if (options.killEveryMs < 100) throw new InvalidInputError('--kill-every must be at least 100ms');
  const { runChaos } = await import('../../../shared/tooling/chaos/run-chaos.js');
  const tty = process.stderr.isTTY;
  let lastLine = 0;
  const result = await runChaos({
    ...options,
    progress: (line) => {
      if (tty) process.stderr.write(`\r${line.padEnd(110)}`);
      else if (Date.now() - lastLine >= 5000 || line.startsWith('chaos:')) {
        lastLine = Date.now();
        process.stderr.write(`${line}\n`);
      }
    },
  });
  if (tty) process.stderr.write('\n');
  console.log(formatChaos(result).join('\n'));
  if (argv.keep) console.log(`workspace kept: ${result.workspace}`);
  if (argv.json) {
    const { ledger: _ledger, workspace: _workspace, ...figures } = result;
    writeFileSync(argv.json, `${JSON.stringify(figures, null, 2)}\n`);
  }
  if (!result.ok) throw new CheckFailedError('an invariant did not hold (see the table above)');
}
