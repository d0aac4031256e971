import type { ArgumentsCamelCase } from 'yargs';
import { writeArtifact } from '../../../shared/lab/artifacts.js';
import { countPgStores, countStores, formatReport } from '../../../shared/lab/report.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withPgPartitionStores, withPartitionStores } from '../stores.js';

export const command = 'report';
export const describe = 'write report.txt: orders, outbox, enqueued, processed_unique';

export async function handler(argv: ArgumentsCamelCase<GlobalArgs>): Promise<void> {
  const config = configOf(argv);
  const lines = formatReport(await (onPostgres(config) ? withPgPartitionStores(config, countPgStores) : withPartitionStores(config, countStores, {}, { outboxOnly: true })));
  const path = writeArtifact(config.dir, 'report.txt', lines);
  console.log(lines.join('\n'));
  console.log(`(written to ${path})`);
}
