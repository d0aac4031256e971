import { writeFileSync } from 'node:fs';
import { configOf } from '../options.js';
import { refusePartitioned } from '../stores.js';
import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseDuration } from '../../../shared/outbox/duration.js';
import { formatChaos } from '../../../shared/tooling/chaos/format-chaos.js';
import { CHAOS_TARGETS, DEFAULT_CHAOS_TARGETS, DEFAULT_SCALE_OUT_TARGETS, SCALE_OUT_TARGETS } from '../../../shared/tooling/chaos/targets.js';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import { InvalidInputError } from '../../../shared/outbox/errors/invalid-input-error.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import { aggregateHorizon, dedupeWindow } from '../../../shared/runtime/config/consumer-config.js';
import type { GlobalArgs } from '../options.js';

interface Args extends GlobalArgs {
  relays?: string;
  consumers?: string;
  partitions?: string;
  duration: string;
  rate?: string;
  killEvery: string;
  targets?: string;
  seed: string;
  json?: string;
  keep: boolean;
  dedupeWindow: string;
  aggregateHorizon: string;
}

export const command = 'chaos';
export const describe = 'run the apps under pm2 with faults injected, then prove nothing was lost, doubled or reordered';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('duration', { type: 'string', default: '60s', describe: 'how long traffic runs and faults are injected' })
    .option('rate', { type: 'string', defaultDescription: '500 (150 in database mode)', describe: 'order operations per second' })
    .option('kill-every', { type: 'string', default: '2s', describe: 'mean time between faults' })
    .option('targets', {
      type: 'string',
      defaultDescription: DEFAULT_CHAOS_TARGETS.join(','),
      describe: `what to hit, from ${CHAOS_TARGETS.join(',')}; with --database (PostgreSQL, a private Redis Cluster): from ${SCALE_OUT_TARGETS.join(',')}, default ${DEFAULT_SCALE_OUT_TARGETS.join(',')} (redis-wipe: Redis restarts without its data; prune: prune --older-than 1s; pause: SIGSTOP a relay or the consumer; ` +
        `sqlite-lock: app.db's write lock held; handler-fail: every handler attempt fails for a while; corrupt-state: the lab's effect hash a string for 3 s); ` +
        `in database mode: ${PAYMENTS_TARGETS.join(',')} (the payments example, its consumers' ledger deleted under traffic halfway through, then rebuilt by verify --repair --consumer-db)`,
    })
    .option('seed', { type: 'string', default: '1', describe: 'seed of the fault schedule and the traffic (same seed, same schedule)' })
    .option('relays', { type: 'string', describe: 'on PostgreSQL (--database): relay apps [default 4]' })
    .option('consumers', { type: 'string', describe: 'on PostgreSQL (--database): consumer apps [default 3]' })
    .option('dedupe-window', { type: 'string', default: '7d', describe: "the consumer's dedupe window: short, records expire during the faults" })
    .option('aggregate-horizon', { type: 'string', default: 'off', describe: "the consumer's aggregate horizon (at least the window): short, guards are dropped during the run" })
    .option('json', { type: 'string', describe: 'also write the figures as JSON to this file' })
    .option('keep', { type: 'boolean', default: false, describe: 'keep the workspace (data, logs, Redis files) for a look afterwards' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const config = configOf(argv);
  if (config.databaseUrl) return scaleOut(argv, config.databaseUrl, config.partitions ?? 1);
  if (argv.targets?.split(',').some((t) => t.trim() === 'consumer-db-loss')) return databaseMode(argv);
  if (argv.relays !== undefined || argv.consumers !== undefined) throw new InvalidInputError('--relays and --consumers are for chaos on PostgreSQL (--database): the run on app.db has 2 relays and 1 consumer');
  // On app.db the run has one private Redis; on PostgreSQL it makes its own cluster and partitions.
  refusePartitioned(config, 'chaos', 'run it with one partition on one Redis, or give --database postgres://… for a run on its own Redis Cluster');
  const options = runOptions(argv, CHAOS_TARGETS, DEFAULT_CHAOS_TARGETS, '--targets');
  const dedupeWindowMs = dedupeWindow.parse(argv.dedupeWindow, '--dedupe-window');
  const aggregateHorizonMs = aggregateHorizon.parse(argv.aggregateHorizon, '--aggregate-horizon');
  if (aggregateHorizonMs !== undefined && aggregateHorizonMs < dedupeWindowMs) {
    throw new InvalidInputError(`--aggregate-horizon must be at least --dedupe-window, got ${argv.aggregateHorizon} and ${argv.dedupeWindow}`);
  }
  const { runChaos } = await import('../../../shared/tooling/chaos/run-chaos.js');
  const result = await runChaos({ ...options, dedupeWindowMs, aggregateHorizonMs, progress: progressLine() });
  const { ledger: _ledger, ...rest } = result;
  finish(argv, formatChaos(result), rest);
}

/** Prints the table, writes the figures (`--json`, without the workspace), fails when an invariant did not hold. */
function finish(argv: ArgumentsCamelCase<Args>, table: string[], { workspace, ok, ...figures }: { workspace: string; ok: boolean }): void {
  if (process.stderr.isTTY) process.stderr.write('\n');
  console.log(table.join('\n'));
  if (argv.keep && workspace) console.log(`workspace kept: ${workspace}`);
  if (argv.json) writeFileSync(argv.json, `${JSON.stringify({ ...figures, ok }, null, 2)}\n`);
  if (!ok) throw new CheckFailedError('an invariant did not hold (see the table above)');
}

function progressLine(): (line: string) => void {
  const tty = process.stderr.isTTY;
  let lastLine = 0;
  return (line) => {
    if (tty) process.stderr.write(`\r${line.padEnd(110)}`);
    else if (Date.now() - lastLine >= 5000 || line.startsWith('chaos:')) {
      lastLine = Date.now();
      process.stderr.write(`${line}\n`);
    }
  };
}

/** The options both runs take, checked: `--targets` from `known` (`defaults` when not given), duration, rate, mean time between faults, seed. */
function runOptions<T extends string>(argv: ArgumentsCamelCase<Args>, known: readonly T[], defaults: readonly T[], named: string) {
  const targets = (argv.targets ?? defaults.join(',')).split(',').map((t) => t.trim()) as T[];
  if (targets.length === 0 || targets.some((t) => !known.includes(t))) {
    throw new InvalidInputError(`${named} takes a comma-separated list of ${known.join(', ')}, got ${JSON.stringify(argv.targets)}`);
  }
  const options = {
    durationMs: parseDuration(argv.duration, '--duration'),
    rate: parseCount(argv.rate ?? '500', '--rate', 100_000),
    killEveryMs: parseDuration(argv.killEvery, '--kill-every'),
    targets,
    seed: parseCount(argv.seed, '--seed', 2 ** 31),
    keep: argv.keep,
  };
  if (options.killEveryMs < 100) throw new InvalidInputError('--kill-every must be at least 100ms');
  return options;
}

/** The targets of the database-mode run (the payments example): the process faults, and the ledger lost. */
const PAYMENTS_TARGETS = ['processes', 'consumer-db-loss'] as const;

/** Chaos in database mode: the payments example under pm2, its ledger lost halfway and rebuilt. */
async function databaseMode(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const options = runOptions({ ...argv, rate: argv.rate ?? '150' }, PAYMENTS_TARGETS, PAYMENTS_TARGETS, '--targets in database mode');
  const { runPaymentsChaos, formatPaymentsChaos } = await import('../../../shared/tooling/chaos/payments-chaos.js');
  const result = await runPaymentsChaos({ durationMs: options.durationMs, rate: options.rate, seed: options.seed, consumerDbLoss: true, progress: progressLine() });
  finish(argv, formatPaymentsChaos(result).split('\n'), { workspace: '', ...result });
}

/** Chaos on the scale-out path: a database of its own on the PostgreSQL server `serverUrl` names, a private Redis Cluster. */
async function scaleOut(argv: ArgumentsCamelCase<Args>, serverUrl: string, partitions: number): Promise<void> {
  const common = runOptions(argv, SCALE_OUT_TARGETS, DEFAULT_SCALE_OUT_TARGETS, '--targets on PostgreSQL');
  if (argv.partitions === undefined && !process.env.OUTBOX_PARTITIONS) partitions = 4;
  const options = {
    ...common,
    relays: argv.relays === undefined ? 4 : parseCount(argv.relays, '--relays', 16),
    consumers: argv.consumers === undefined ? 3 : parseCount(argv.consumers, '--consumers', 16),
    partitions,
    serverUrl,
  };
  const { runScaleOutChaos } = await import('../../../shared/tooling/chaos/scale-out-chaos.js');
  const { formatScaleOutChaos } = await import('../../../shared/tooling/chaos/format-chaos.js');
  const result = await runScaleOutChaos({ ...options, progress: progressLine() });
  finish(argv, formatScaleOutChaos(result), result);
}
