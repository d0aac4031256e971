import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { createOutbox } from 'outbox';
import { paymentEvents } from './events.js';

export interface PaymentsService {
  db: Database.Database;
  /** Captures `amountCents` for `account`; returns the payment id. */
  capture(account: string, amountCents: number): string;
  /** Refunds a captured payment; false when there is none to refund. */
  refund(paymentId: string): boolean;
  close(): void;
}

/**
 * The producer: a payments table of its own, and the outbox next to it in the same file. Each write
 * changes `payments` and appends its event in one transaction.
 */
export function openPaymentsService(path: string): PaymentsService {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 5000');
  db.exec(`CREATE TABLE IF NOT EXISTS payments (
    id TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    status TEXT NOT NULL CHECK (status IN ('CAPTURED', 'REFUNDED'))
  )`);
  const outbox = createOutbox(db, { events: paymentEvents });
  const insert = db.prepare("INSERT INTO payments (id, account, amount_cents, status) VALUES (?, ?, ?, 'CAPTURED')");
  const refund = db.prepare<[string], { account: string; amount_cents: number }>(
    "UPDATE payments SET status = 'REFUNDED' WHERE id = ? AND status = 'CAPTURED' RETURNING account, amount_cents",
  );

  return {
    db,
    capture: db.transaction((account: string, amountCents: number): string => {
      const id = randomUUID();
      insert.run(id, account, amountCents);
      outbox.append({ aggregateType: 'account', aggregateId: account, type: 'PaymentCaptured', payload: { paymentId: id, amountCents } });
      return id;
    }),
    refund: db.transaction((paymentId: string): boolean => {
      const payment = refund.get(paymentId);
      if (!payment) return false;
      outbox.append({ aggregateType: 'account', aggregateId: payment.account, type: 'PaymentRefunded', payload: { paymentId, amountCents: payment.amount_cents } });
      return true;
    }),
    close: () => db.close(),
  };
}
