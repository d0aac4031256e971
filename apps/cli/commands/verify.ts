import type { ArgumentsCamelCase, Argv } from 'yargs';
import { formatChecks, verifyStores } from '../../../shared/checks/verify.js';
import { CheckFailedError } from '../../../shared/errors/check-failed-error.js';
import { republish } from '../../../shared/recovery/repair.js';
import { createRelay } from '../../../shared/relay/relay.js';
import { describePairing } from '../../../shared/relay/store-pairing.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withStores } from '../stores.js';

interface Args extends GlobalArgs {
  repair: boolean;
}

export const command = 'verify';
export const describe = 'reconcile SQLite with what the consumer applied; exit 1 if an invariant fails';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs.option('repair', {
    type: 'boolean',
    default: false,
    describe: 'republish exactly the events found lost (never applied and nowhere in Redis)',
  });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  await withStores(configOf(argv), async (db, redis) => {
    const { checks, lost, figures } = await verifyStores(db, redis);
    console.log(formatChecks(checks).join('\n'));
    if (argv.repair && figures.redisStateLost) {
      // Everything was lost: rebuild every effect from SQLite, as the relay app does on its own.
      const relay = createRelay(db, redis, { onPairing: (pairing) => console.log(`repair: ${describePairing(pairing)}`) });
      const { events } = await relay.relayAll();
      console.log(`repair: relayed ${events} event(s) to outbox.events; once the consumer has applied them, verify again`);
      return;
    }
    if (argv.repair) {
      if (lost.length === 0) {
        console.log('repair: no event is lost, nothing to republish');
      } else {
        const { reset } = await republish(db, redis, lost);
        console.log(`repair: republished ${reset} lost event(s) to outbox.events; once the consumer has applied them, verify again`);
        return;
      }
    }
    const failed = checks.filter((c) => c.status === 'FAIL').length;
    if (failed > 0) throw new CheckFailedError(`${failed} invariant(s) failed`);
  });
}
