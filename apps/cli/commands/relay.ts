import type { ArgumentsCamelCase, Argv } from 'yargs';
import { relayBatchSize } from '../../../shared/runtime/config/relay-config.js';
import { flagOptions, forCommand, readSettings } from '../../../shared/runtime/config/settings.js';
import { keys } from '../../../shared/outbox/redis/keys.js';
import { createRelay } from '../../../shared/outbox/relay/relay.js';
import { describePairing } from '../../../shared/outbox/relay/store-pairing.js';
import { configOf, type GlobalArgs } from '../options.js';
import type { Partitions } from '../../../shared/outbox/redis/partitions.js';
import { onPostgres, withPgPartitionStores, withPartitionStores } from '../stores.js';

export interface RelayArgs extends GlobalArgs {
  batchSize: string;
}

export const command = 'relay';
export const describe = 'move every PENDING outbox row onto outbox.events and mark it PUBLISHED';

/** The relay app's definitions (shared/runtime/config/relay-config.ts), read from the flags only. */
const settings = { batchSize: forCommand(relayBatchSize) };

export const builder = (yargs: Argv<GlobalArgs>) => yargs.options(flagOptions(settings));

export async function handler(argv: ArgumentsCamelCase<RelayArgs>): Promise<void> {
  const { batchSize } = readSettings(settings, argv);
  const config = configOf(argv);
  const onPairing = (pairing: Parameters<typeof describePairing>[0]) => {
    if (pairing.kind === 'rebuilt') console.log(describePairing(pairing, onPostgres(config) ? 'PostgreSQL' : 'SQLite'));
  };
  const report = async (partitions: Partitions, started: number, { events, batches }: { events: number; batches: number }) => {
    const ms = (performance.now() - started).toFixed(1);
    const lengths = await Promise.all(partitions.clients.map((redis) => redis.llen(keys.events)));
    const queued = lengths.reduce((sum, n) => sum + n, 0);
    const byPartition = partitions.count > 1 ? ` (${lengths.join(', ')} by partition)` : '';
    console.log(`relayed ${events} event${events === 1 ? '' : 's'} in ${batches} batch${batches === 1 ? '' : 'es'} (${ms} ms); LLEN ${keys.events} = ${queued}${byPartition}`);
  };
  if (onPostgres(config)) {
    // Any number of these at once, beside the relay apps: each batch claims rows no other relay holds.
    const { createPgRelay } = await import('../../../shared/outbox/postgres/pg-relay.js');
    await withPgPartitionStores(config, async (pool, partitions) => {
      const started = performance.now();
      await report(partitions, started, await createPgRelay(pool, partitions, { batchSize, onPairing }).relayAll());
    }, { requireNoEviction: true });
    return;
  }
  await withPartitionStores(config, async (db, partitions) => {
    const started = performance.now();
    await report(partitions, started, await createRelay(db, partitions, { batchSize, onPairing }).relayAll());
  }, { requireNoEviction: true }, { outboxOnly: true });
}
