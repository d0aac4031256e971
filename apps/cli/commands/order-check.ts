import type { ArgumentsCamelCase } from 'yargs';
import { writeArtifact } from '../../../shared/lab/artifacts.js';
import { checkOrder, formatOrderCheck } from '../../../shared/lab/checks/order-check.js';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withPartitions } from '../stores.js';

export const command = 'order-check';
export const describe = 'check, without consuming, that each aggregate\'s events are queued in ascending seq';

export async function handler(argv: ArgumentsCamelCase<GlobalArgs>): Promise<void> {
  const config = configOf(argv);
  const result = await withPartitions(config, checkOrder);
  const lines = formatOrderCheck(result);
  const path = writeArtifact(config.dir, 'order_check.out', lines);
  console.log(lines.join('\n'));
  console.log(`(${result.events} events of ${result.aggregates} aggregates checked; written to ${path})`);
  if (result.violations.length > 0) throw new CheckFailedError(`${result.violations.length} event(s) queued out of seq order`);
}
