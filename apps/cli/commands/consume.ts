import type { ArgumentsCamelCase, Argv } from 'yargs';
import { aggregateHorizon, consumerBatchSize, consumerId, dedupeWindow, maxAttempts } from '../../../shared/runtime/config/consumer-config.js';
import { flagOptions, forCommand, readSettings } from '../../../shared/runtime/config/settings.js';
import { handlers } from '../../../shared/lab/orders/order-handlers.js';
import { createConsumer } from '../../../shared/outbox/consumer/create-consumer.js';
import { keys } from '../../../shared/outbox/redis/keys.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withPartitions } from '../stores.js';

interface Args extends GlobalArgs {
  consumerId: string;
  batchSize: string;
  maxAttempts: string;
  dedupeWindowMs: string;
  aggregateHorizonMs: string;
}

export const command = 'consume';
export const describe = 'drain outbox.events through the idempotent consumer, then exit';

/** The consumer app's definitions (shared/runtime/config/consumer-config.ts), read from the flags only, with the command's own defaults. */
const settings = {
  consumerId: forCommand(consumerId, 'cli'),
  batchSize: forCommand(consumerBatchSize, '1000'),
  maxAttempts: forCommand(maxAttempts),
  dedupeWindowMs: forCommand(dedupeWindow),
  aggregateHorizonMs: forCommand(aggregateHorizon),
};

export const builder = (yargs: Argv<GlobalArgs>) => yargs.options(flagOptions(settings));

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const options = readSettings(settings, argv);
  await withPartitions(configOf(argv), async (partitions) => {
    const problems = new Set<string>();
    // The lab's handlers, in this thread: a drain of a few events does not pay for starting threads.
    const consumer = await createConsumer({ redis: partitions, handlers, ...options, onProblem: (problem) => problems.add(problem) });
    const s = await consumer.drain();
    for (const problem of problems) console.error(`outbox: bad state in Redis: ${problem}`);
    console.log(
      `received ${s.received} (${s.recovered} recovered from ${consumer.processingList}): applied ${s.applied}, ` +
        `duplicates skipped ${s.duplicates}, parked ${s.parked}, dead-lettered ${s.dead}` +
        (s.retried > 0 ? `, handler failures retried ${s.retried}` : '') +
        (s.invalid > 0 ? `, left in ${consumer.processingList} for bad state in Redis ${s.invalid}` : ''),
    );
    const processed = await Promise.all(partitions.clients.map((redis) => redis.hlen(keys.processed)));
    const byPartition = partitions.count > 1 ? ` (${processed.join(', ')} by partition)` : '';
    console.log(`HLEN ${keys.processed} = ${processed.reduce((sum, n) => sum + n, 0)}${byPartition}`);
  }, { requireNoEviction: true });
}
