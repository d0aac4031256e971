import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseDuration } from '../../../shared/outbox/duration.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import { prune, type PruneResult } from '../../../shared/operations/prune/prune.js';
import { guard, guardOptions, idRange, mayAsk, rowLine, withMore, type GuardArgs } from '../confirm.js';
import { configOf, type GlobalArgs } from '../options.js';
import { refusedOnPostgres, withStores } from '../stores.js';

interface Args extends GlobalArgs, GuardArgs {
  olderThan: string;
  batchSize: string;
}

export const command = 'prune';
export const describe = 'delete PUBLISHED outbox rows older than a window once the consumer applied them, in small batches';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('older-than', { type: 'string', demandOption: true, requiresArg: true, describe: 'keep rows younger than this, e.g. 7d, 12h (a unit is required; 0s: no window)' })
    .option('batch-size', { type: 'string', default: '1000', describe: 'rows per transaction (how long a producer may wait)' })
    .options(guardOptions);

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const olderThanMs = parseDuration(argv.olderThan, '--older-than');
  const batchSize = parseCount(argv.batchSize, '--batch-size', 100_000);
  const result = await withStores(refusedOnPostgres(configOf(argv), 'prune'), async (db, redis) => {
    // The plan is a full pass (reads and Redis look-ups): made only when it is shown.
    if (!argv.dryRun && !mayAsk(argv)) return prune(db, redis, olderThanMs, { batchSize });
    const plan = await prune(db, redis, olderThanMs, { batchSize, dryRun: true });
    const change = plan.lastId === null ? 'delete no row' : `delete ${plan.deleted} PUBLISHED row(s) (${idRange(plan.firstId!, plan.lastId)}) the consumer applied`;
    const goOn = await guard(argv, {
      command: 'prune',
      change: `${change}; kept (not applied yet): ${plan.keptNotApplied}`,
      size: plan.deleted,
      shown: withMore(plan.firstRows.map(rowLine), plan.deleted),
    });
    // Confirmed: the same window and no row beyond what was shown.
    return goOn ? prune(db, redis, olderThanMs, { batchSize, now: plan.now, throughId: plan.lastId ?? 0 }) : null;
  });
  if (result !== null) printResult(result);
}

function printResult(result: PruneResult): void {
  console.log(
    `pruned ${result.deleted} PUBLISHED row(s) in ${result.batches} batch(es), ${result.ms.toFixed(0)} ms; ` +
      `the longest batch held the write lock ${result.maxBatchMs.toFixed(1)} ms`,
  );
  console.log(`kept (not applied yet): ${result.keptNotApplied}`);
}
