import type { ArgumentsCamelCase, Argv } from 'yargs';
import { createConsumer, DEFAULT_MAX_ATTEMPTS } from '../../../shared/consumer/consumer.js';
import { InvalidInputError } from '../../../shared/errors/invalid-input-error.js';
import { parseCount } from '../../../shared/orders/validate.js';
import { keys } from '../../../shared/redis/keys.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withRedis } from '../stores.js';

interface Args extends GlobalArgs {
  consumerId: string;
  batchSize: string;
  maxAttempts: string;
}

export const command = 'consume';
export const describe = 'drain outbox.events through the idempotent consumer, then exit';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('consumer-id', {
      type: 'string',
      default: 'cli',
      describe: 'names the processing list; a rerun with the same id recovers what a crash left there',
    })
    .option('batch-size', { type: 'string', default: '1000', describe: 'messages taken per round' })
    .option('max-attempts', {
      type: 'string',
      default: String(DEFAULT_MAX_ATTEMPTS),
      describe: 'handler attempts at an event before it is dead-lettered; a failed one is retried in the same run after a backoff',
    });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(argv.consumerId)) {
    throw new InvalidInputError(`--consumer-id must be 1-64 letters, digits, ".", "_" or "-", got ${JSON.stringify(argv.consumerId)}`);
  }
  const batchSize = parseCount(argv.batchSize, '--batch-size', 100_000);
  const maxAttempts = parseCount(argv.maxAttempts, '--max-attempts', 1000);
  await withRedis(configOf(argv), async (redis) => {
    const problems = new Set<string>();
    const consumer = createConsumer(redis, { consumerId: argv.consumerId, batchSize, maxAttempts, onProblem: (problem) => problems.add(problem) });
    const s = await consumer.drain();
    for (const problem of problems) console.error(`outbox: bad state in Redis: ${problem}`);
    console.log(
      `received ${s.received} (${s.recovered} recovered from ${consumer.processingList}): applied ${s.applied}, ` +
        `duplicates skipped ${s.duplicates}, parked ${s.parked}, dead-lettered ${s.dead}` +
        (s.retried > 0 ? `, handler failures retried ${s.retried}` : '') +
        (s.invalid > 0 ? `, left in ${consumer.processingList} for bad state in Redis ${s.invalid}` : ''),
    );
    console.log(`HLEN ${keys.processed} = ${await redis.hlen(keys.processed)}`);
  }, { requireNoEviction: true });
}
