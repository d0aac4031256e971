// The payments service's invariants for `outbox verify`: the module's default export is its check
// set, run by `outbox verify --consumer-db <ledger.db> --checks dist/examples/payments/verify-checks.js`
// after verify's own checks (lost, applied twice, out of order, inbox rows).
import { defineVerifyChecks, invariantCheck, type InvariantCheck } from 'outbox';
import { checkBalances } from './check-balances.js';

const BALANCES = 'accounts whose ledger or balance != captured payments';
const ENTRIES = 'ledger entries = payment events';

export default defineVerifyChecks({
  name: 'payments',
  checks: {
    [BALANCES]: ({ store, producer, consumer, inFlight, newerInFlight }): InvariantCheck[] => {
      if (store !== 'sqlite') throw new Error('reads the payments table in app.db: the payments example runs on SQLite');
      if (consumer === undefined) throw new Error('needs the ledger: pass --consumer-db <ledger.db>');
      // The payments table runs ahead of the ledger while events are on their way: judged once drained.
      const waiting = inFlight + newerInFlight;
      if (waiting > 0) {
        const notJudged = `not judged: ${waiting} event(s) in flight; verify a drained system`;
        return [BALANCES, ENTRIES].map((name) => ({ name, expected: '-', actual: notJudged, status: 'info' }));
      }
      // Each side read in one transaction: the ledger and balances a consumer commit changes together.
      const check = producer.transaction(() => consumer.transaction(() => checkBalances(producer, consumer))())();
      return [invariantCheck(BALANCES, 0, check.mismatches.length, check.mismatches), invariantCheck(ENTRIES, check.expectedEntries, check.entries)];
    },
  },
});
