import type { ArgumentsCamelCase, Argv } from 'yargs';
import type { Partitions } from '../../../shared/outbox/redis/partitions.js';
import { parseDuration } from '../../../shared/outbox/duration.js';
import { parseCount } from '../../../shared/lab/orders/validate.js';
import { prune, type PruneResult } from '../../../shared/operations/prune/prune.js';
import { guard, guardOptions, idRange, mayAsk, rowLine, withMore, type GuardArgs } from '../confirm.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withPartitionStores, withPgPartitionStores } from '../stores.js';

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
  const config = configOf(argv);
  // Across partitions too: each row is looked up in its aggregate's partition.
  const result = onPostgres(config)
    ? await withPgPartitionStores(config, async (pool, partitions) => {
        const { pgPruneRows } = await import('../../../shared/operations/prune/pg-prune.js');
        return pruneConfirmed(argv, pgPruneRows(pool), partitions, olderThanMs, batchSize);
      })
    : await withPartitionStores(config, (db, partitions) => pruneConfirmed(argv, db, partitions, olderThanMs, batchSize), {}, { outboxOnly: true });
  if (result !== null) printResult(result, onPostgres(config) ? 'the longest batch took' : 'the longest batch held the write lock');
}

/** Prunes, after the plan was shown (dry run) or confirmed; null when it was not. */
async function pruneConfirmed(
  argv: ArgumentsCamelCase<Args>,
  store: Parameters<typeof prune>[0],
  redis: Partitions,
  olderThanMs: number,
  batchSize: number,
): Promise<PruneResult | null> {
  // The plan is a full pass (reads and Redis look-ups): made only when it is shown.
  if (!argv.dryRun && !mayAsk(argv)) return prune(store, redis, olderThanMs, { batchSize });
  const plan = await prune(store, redis, olderThanMs, { batchSize, dryRun: true });
  const change = plan.lastId === null ? 'delete no row' : `delete ${plan.deleted} PUBLISHED row(s) (${idRange(plan.firstId!, plan.lastId)}) the consumer applied`;
  const goOn = await guard(argv, {
    command: 'prune',
    change: `${change}; kept (not applied yet): ${plan.keptNotApplied}`,
    size: plan.deleted,
    shown: withMore(plan.firstRows.map(rowLine), plan.deleted),
  });
  // Confirmed: the same window and no row beyond what was shown.
  return goOn ? prune(store, redis, olderThanMs, { batchSize, now: plan.now, throughId: plan.lastId ?? 0 }) : null;
}

function printResult(result: PruneResult, longest: string): void {
  console.log(`pruned ${result.deleted} PUBLISHED row(s) in ${result.batches} batch(es), ${result.ms.toFixed(0)} ms; ${longest} ${result.maxBatchMs.toFixed(1)} ms`);
  console.log(`kept (not applied yet): ${result.keptNotApplied}`);
  if (result.stoppedEarly) console.log(STOPPED_EARLY);
}

const STOPPED_EARLY =
  'stopped early: a row it read was set back to PENDING meanwhile (outbox replay), or an earlier row of its aggregate is still in the store; run prune again once the relay and the consumer have caught up';
