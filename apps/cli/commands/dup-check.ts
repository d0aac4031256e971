import type { ArgumentsCamelCase } from 'yargs';
import { writeArtifact } from '../../../shared/lab/artifacts.js';
import { findDuplicates, formatDuplicates } from '../../../shared/lab/checks/dup-check.js';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withPartitions } from '../stores.js';

export const command = 'dup-check';
export const describe = 'find event_ids queued more than once (at-least-once delivery at work)';

export async function handler(argv: ArgumentsCamelCase<GlobalArgs>): Promise<void> {
  const config = configOf(argv);
  const { events, duplicates } = await withPartitions(config, findDuplicates);
  const lines = formatDuplicates(duplicates);
  const path = writeArtifact(config.dir, 'atleastonce.out', lines);
  console.log(lines.join('\n'));
  console.log(`(${events} queued events read; written to ${path})`);
  if (duplicates.length === 0) throw new CheckFailedError('no event is queued twice (run relay-crash, then relay)');
}
