import type { Database } from 'better-sqlite3';

export interface BalanceCheck {
  accounts: number;
  /** `account: ledger X, balances Y, payments say Z` for every account where they differ. */
  mismatches: string[];
  /** Ledger entries against the events the payments table implies (a capture, plus one per refund). */
  entries: number;
  expectedEntries: number;
}

/**
 * The invariant: for every account, the sum of its ledger entries and its running balance in the
 * consumer's database both equal what the producer's payments table says (captured, not refunded),
 * and there is exactly one ledger entry per event. Run once the consumer has drained.
 */
export function checkBalances(payments: Database, ledger: Database): BalanceCheck {
  const expected = new Map(
    (payments.prepare("SELECT account, SUM(CASE status WHEN 'CAPTURED' THEN amount_cents ELSE 0 END) AS cents FROM payments GROUP BY account").all() as { account: string; cents: number }[]).map(
      (r) => [r.account, r.cents],
    ),
  );
  const sums = new Map((ledger.prepare('SELECT account, SUM(amount_cents) AS cents FROM ledger GROUP BY account').all() as { account: string; cents: number }[]).map((r) => [r.account, r.cents]));
  const balances = new Map((ledger.prepare('SELECT account, balance_cents AS cents FROM balances').all() as { account: string; cents: number }[]).map((r) => [r.account, r.cents]));
  const accounts = new Set([...expected.keys(), ...sums.keys(), ...balances.keys()]);
  const mismatches = [...accounts]
    .filter((a) => (sums.get(a) ?? 0) !== (expected.get(a) ?? 0) || (balances.get(a) ?? 0) !== (expected.get(a) ?? 0))
    .map((a) => `${a}: ledger ${sums.get(a) ?? 0}, balances ${balances.get(a) ?? 0}, payments say ${expected.get(a) ?? 0}`);
  const expectedEntries = payments.prepare("SELECT COUNT(*) + SUM(status = 'REFUNDED') FROM payments").pluck().get() as number | null;
  const entries = ledger.prepare('SELECT COUNT(*) FROM ledger').pluck().get() as number;
  return { accounts: accounts.size, mismatches, entries, expectedEntries: expectedEntries ?? 0 };
}
