// The payments producer app: a traffic loop of captures and refunds on `<OUTBOX_DIR>/app.db`, each
// write and its event in one transaction (payments-service.ts), until SIGINT/SIGTERM.
//
// Settings (environment): OUTBOX_DIR (default ~/outbox-payments), PAYMENTS_RATE (operations a
// second, default 50), PAYMENTS_ACCOUNTS (default 20), PAYMENTS_REFUND_SHARE (0-1: the share of
// operations that refund a recent capture, default 0.25), OUTBOX_LOG_LEVEL.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { openPaymentsService } from './payments-service.js';
import { StoreUnavailableError } from 'outbox';
import { runPaymentsApp, settingsOf, SettingError } from './app-runtime.js';

/** How many recent captures a refund is picked from. */
const RECENT = 500;

runPaymentsApp('payments-producer', async (log) => {
  const settings = settingsOf();
  const dir = settings.dir();
  const rate = settings.number('PAYMENTS_RATE', 50, 0.1, 100_000);
  const accounts = settings.integer('PAYMENTS_ACCOUNTS', 20, 1, 1_000_000);
  const refundShare = settings.number('PAYMENTS_REFUND_SHARE', 0.25, 0, 1);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // The service's own database: its payments table and the library's outbox tables (createOutbox).
  let service: ReturnType<typeof openPaymentsService>;
  try {
    service = openPaymentsService(join(dir, 'app.db'));
  } catch (error) {
    // Outbox tables of another version, or a table of another shape under a library name: a restart would meet it again.
    if (error instanceof StoreUnavailableError) throw new SettingError(error.message);
    throw error;
  }
  const recent: string[] = [];
  let captures = 0;
  let refunds = 0;
  let done = 0;
  const startedAt = Date.now();

  function operate(): void {
    if (recent.length > 0 && Math.random() < refundShare) {
      const [id] = recent.splice(Math.floor(Math.random() * recent.length), 1);
      if (service.refund(id)) refunds += 1;
      return;
    }
    recent.push(service.capture(`acc-${Math.floor(Math.random() * accounts)}`, 100 + Math.floor(Math.random() * 9900)));
    if (recent.length > RECENT) recent.shift();
    captures += 1;
  }

  // Catches up to `rate` a second on every tick; a tick that falls behind (a busy disk) does more.
  const timer = setInterval(() => {
    const due = Math.floor(((Date.now() - startedAt) / 1000) * rate);
    try {
      for (; done < due; done += 1) operate();
    } catch (error) {
      // SQLITE_BUSY past the busy timeout: the operation was rolled back whole; the next tick goes on.
      log.warn('payment not written', { error });
      done = due;
    }
  }, 20);
  const stats = setInterval(() => log.info('producer stats', { captures, refunds }), 10_000);
  log.info('producer started', { db: service.db.name, rate, accounts, refundShare });

  return async () => {
    clearInterval(timer);
    clearInterval(stats);
    service.close();
    log.info('producer stopped', { captures, refunds });
  };
});
