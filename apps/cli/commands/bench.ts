import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { configOf } from '../options.js';
import { refuseOnPostgres, refusePartitioned } from '../stores.js';
import type { ArgumentsCamelCase, Argv } from 'yargs';
import { formatBench } from '../../../shared/tooling/bench/format-bench.js';
import { BENCH_STAGES, DEFAULT_BENCH_POSTGRES, DEFAULT_BENCH_STAGES, type BenchStage } from '../../../shared/tooling/bench/stages.js';
import { InvalidInputError } from '../../../shared/outbox/errors/invalid-input-error.js';
import { REPO_ROOT } from '../../../shared/tooling/local/pm2.js';
import type { GlobalArgs } from '../options.js';

interface Args extends GlobalArgs {
  only: string;
  quick: boolean;
  out: string;
  postgres: string;
}

export const command = 'bench';
export const describe = 'measure each stage against the raw limit and a naive implementation, in one run';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('only', {
      type: 'string',
      default: DEFAULT_BENCH_STAGES.join(','),
      describe: `stages to run: ${BENCH_STAGES.join(',')} (soak and verify only when named)`,
    })
    .option('quick', { type: 'boolean', default: false, describe: 'small sizes: a smoke run, not a measurement' })
    .option('out', { type: 'string', default: join(REPO_ROOT, 'bench', 'results'), defaultDescription: 'bench/results in the repository', describe: 'directory for the JSON figures' })
    .option('postgres', { type: 'string', default: DEFAULT_BENCH_POSTGRES, describe: 'PostgreSQL server for the scale-out stage: it creates a database of its own there (outbox_bench_*) and drops it' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  // Its own workspace on app.db; the apps it starts would read OUTBOX_DATABASE_URL.
  refuseOnPostgres(configOf(argv), 'bench');
  // Its own workspace, one Redis: the apps it starts would read OUTBOX_PARTITIONS / OUTBOX_REDIS_CLUSTER.
  refusePartitioned(configOf(argv), 'bench');
  const stages = argv.only.split(',').map((s) => s.trim()) as BenchStage[];
  const unknown = stages.filter((s) => !BENCH_STAGES.includes(s));
  if (unknown.length > 0) throw new InvalidInputError(`--only takes ${BENCH_STAGES.join(', ')}, got ${JSON.stringify(argv.only)}`);
  const { FULL, QUICK, runBench } = await import('../../../shared/tooling/bench/run-bench.js');
  const result = await runBench(stages, argv.quick ? QUICK : FULL, argv.postgres);
  console.log(formatBench(result).join('\n'));
  mkdirSync(argv.out, { recursive: true });
  const file = join(argv.out, `bench-${result.at.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  console.log(`\n(figures written to ${file})`);
  if (result.soak && !argv.quick) {
    const { soakChart } = await import('../../../shared/tooling/bench/soak-chart.js');
    const chart = join(REPO_ROOT, 'docs', 'soak.svg');
    writeFileSync(chart, soakChart(result.soak));
    console.log(`(soak chart written to ${chart})`);
  }
}
