import type Database from 'better-sqlite3';

// The payments example is built by examples/tsconfig.json against the package's declarations (it
// imports 'outbox'), after the tests: loaded at run time, typed here by what the tests use.
export interface PaymentsService {
  db: Database.Database;
  capture(account: string, amountCents: number): string;
  refund(paymentId: string): boolean;
  close(): void;
}
const example = (file: string) => import(new URL(`../../examples/payments/${file}`, import.meta.url).href);
export const { openPaymentsService } = (await example('payments-service.js')) as { openPaymentsService(path: string): PaymentsService };
export const { checkBalances } = (await example('check-balances.js')) as {
  checkBalances(payments: Database.Database, ledger: Database.Database): { accounts: number; mismatches: string[]; entries: number; expectedEntries: number };
};
