import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseDuration } from '../../../shared/duration.js';
import { parseCount } from '../../../shared/orders/validate.js';
import { prune } from '../../../shared/prune.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withStores } from '../stores.js';

interface Args extends GlobalArgs {
  olderThan: string;
  batchSize: string;
}

export const command = 'prune';
export const describe = 'delete PUBLISHED outbox rows older than a window once the consumer applied them, in small batches';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('older-than', { type: 'string', demandOption: true, requiresArg: true, describe: 'keep rows younger than this, e.g. 7d, 12h' })
    .option('batch-size', { type: 'string', default: '1000', describe: 'rows per transaction (how long a producer may wait)' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const olderThanMs = parseDuration(argv.olderThan, '--older-than');
  const batchSize = parseCount(argv.batchSize, '--batch-size', 100_000);
  const result = await withStores(configOf(argv), (db, redis) => prune(db, redis, olderThanMs, { batchSize }));
  console.log(
    `pruned ${result.deleted} PUBLISHED row(s) in ${result.batches} batch(es), ${result.ms.toFixed(0)} ms; ` +
      `the longest batch held the write lock ${result.maxBatchMs.toFixed(1)} ms`,
  );
  console.log(`kept (not applied yet): ${result.keptNotApplied}`);
}
