import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseCount } from '../../../shared/orders/validate.js';
import { keys } from '../../../shared/redis/keys.js';
import { createRelay, DEFAULT_RELAY_BATCH_SIZE } from '../../../shared/relay/relay.js';
import { describePairing } from '../../../shared/relay/store-pairing.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withStores } from '../stores.js';

export interface RelayArgs extends GlobalArgs {
  batchSize: string;
}

export const command = 'relay';
export const describe = 'move every PENDING outbox row onto outbox.events and mark it PUBLISHED';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs.option('batch-size', {
    type: 'string',
    default: String(DEFAULT_RELAY_BATCH_SIZE),
    describe: 'rows per batch (one push script and one UPDATE transaction each)',
  });

export async function handler(argv: ArgumentsCamelCase<RelayArgs>): Promise<void> {
  const batchSize = parseCount(argv.batchSize, '--batch-size', 100_000);
  await withStores(configOf(argv), async (db, redis) => {
    const started = performance.now();
    const onPairing = (pairing: Parameters<typeof describePairing>[0]) => {
      if (pairing.kind === 'rebuilt') console.log(describePairing(pairing));
    };
    const { events, batches } = await createRelay(db, redis, { batchSize, onPairing }).relayAll();
    const ms = (performance.now() - started).toFixed(1);
    console.log(`relayed ${events} event${events === 1 ? '' : 's'} in ${batches} batch${batches === 1 ? '' : 'es'} (${ms} ms); LLEN ${keys.events} = ${await redis.llen(keys.events)}`);
  }, { requireNoEviction: true });
}
