import type { Database, Statement } from 'better-sqlite3';
import { defineDatabaseHandlers } from 'outbox';
import { paymentEvents } from './events.js';

/** The consumer's own tables: one ledger entry per event, and each account's running balance. */
export const LEDGER_SCHEMA = `
CREATE TABLE IF NOT EXISTS ledger (
  entry_id TEXT PRIMARY KEY,
  account TEXT NOT NULL,
  payment_id TEXT NOT NULL,
  amount_cents INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS balances (account TEXT PRIMARY KEY, balance_cents INTEGER NOT NULL);
`;

type Delivered = ReturnType<typeof paymentEvents.deliver>;

const statements = new WeakMap<Database, { entry: Statement; balance: Statement }>();

function prepared(db: Database) {
  let s = statements.get(db);
  if (!s) {
    db.exec(LEDGER_SCHEMA);
    s = {
      entry: db.prepare('INSERT INTO ledger (entry_id, account, payment_id, amount_cents) VALUES (?, ?, ?, ?)'),
      balance: db.prepare('INSERT INTO balances (account, balance_cents) VALUES (?, ?) ON CONFLICT (account) DO UPDATE SET balance_cents = balance_cents + excluded.balance_cents'),
    };
    statements.set(db, s);
  }
  return s;
}

/** Books one event: a ledger entry (a capture credits the account, a refund debits it) and the balance. */
export function book(event: Delivered, db: Database): void {
  const { entry, balance } = prepared(db);
  const cents = event.type === 'PaymentCaptured' ? event.payload.amountCents : -event.payload.amountCents;
  entry.run(event.eventId, event.aggregateId, event.payload.paymentId, cents);
  balance.run(event.aggregateId, cents);
}

/** The consumer's handler set: database mode, each event booked in the consumer's own SQLite file. */
export const ledgerHandlers = defineDatabaseHandlers(paymentEvents, { PaymentCaptured: book, PaymentRefunded: book });
