// The payments consumer app: the public createConsumer in database mode, long-running (`start`),
// booking every payment event into the ledger in its own SQLite file; SIGINT/SIGTERM stop it after
// the rounds in flight, handing what it had taken back to the queue.
//
// Settings (environment): REDIS_URL (required), OUTBOX_NAMESPACE (the relay's), OUTBOX_DIR
// (default ~/outbox-payments), PAYMENTS_LEDGER (default <OUTBOX_DIR>/ledger.db; instances may share
// it), PAYMENTS_CONSUMER_ID (default payments-<pm2 instance>), PAYMENTS_LEASE_MS (how long a claim
// holds an event, default 30000), PAYMENTS_BATCH_SIZE (default 1000), OUTBOX_LOG_LEVEL.
// The ledger must exist (init-ledger.js makes it once): a missing one is refused in one line, exit 78.
import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { closeRedis, connectRedis, createConsumer } from 'outbox';
import { ledgerHandlers, LEDGER_SCHEMA } from './ledger.js';
import { missingLedgerAdvice, runPaymentsApp, settingsOf, SettingError } from './app-runtime.js';

runPaymentsApp('payments-consumer', async (log) => {
  const settings = settingsOf();
  const redisUrl = settings.redisUrl();
  const namespace = settings.namespace();
  const ledgerPath = resolve(settings.text('PAYMENTS_LEDGER', join(settings.dir(), 'ledger.db')));
  const consumerId = settings.text('PAYMENTS_CONSUMER_ID', `payments-${process.env.NODE_APP_INSTANCE || '0'}`);
  const leaseMs = settings.integer('PAYMENTS_LEASE_MS', 30_000, 1, 86_400_000);
  const batchSize = settings.integer('PAYMENTS_BATCH_SIZE', 1000, 1, 100_000);
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(consumerId)) throw new SettingError(`PAYMENTS_CONSUMER_ID must be 1-64 letters, digits, ".", "_" or "-", got ${JSON.stringify(consumerId)}`);

  // Never created here: a ledger that is gone was lost (or never made), and a new empty one would
  // miss the effect of every event Redis recorded applied. init-ledger.js makes it the first time.
  if (!existsSync(ledgerPath)) throw new SettingError(`no ledger at ${ledgerPath}: ${missingLedgerAdvice(ledgerPath)}`);
  // The consumer's own database: WAL, and a busy timeout for the other instances sharing the file.
  let db: Database.Database;
  try {
    db = new Database(ledgerPath, { fileMustExist: true });
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('busy_timeout = 5000');
    if (!db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_inbox'").get()) {
      db.close();
      throw new SettingError(`the ledger ${ledgerPath} has no inbox table (outbox_inbox), so init-ledger.js did not make it: ${missingLedgerAdvice(ledgerPath)}`);
    }
    db.exec(LEDGER_SCHEMA);
  } catch (error) {
    if (error instanceof SettingError) throw error;
    throw new SettingError(`cannot open the ledger ${ledgerPath} (${(error as Error).message}): check PAYMENTS_LEDGER and its directory's permissions`);
  }
  // Reconnects forever once connected (commands wait meanwhile); refuses a Redis that may evict keys.
  const redis = await connectRedis(redisUrl, { namespace, reconnect: true, name: 'payments-consumer', requireNoEviction: true });
  const consumer = await createConsumer({ redis, handlers: ledgerHandlers, database: db, consumerId, leaseMs, batchSize });
  const running = consumer.start({
    log,
    // The connection BLMOVE takes with: one that fails fast (the loop opens a new one) rather than reconnecting.
    connectBlocking: () => connectRedis(redisUrl, { namespace, name: 'payments-consumer-take' }),
    statsIntervalMs: 10_000,
  });
  log.info('consumer started', { ledger: ledgerPath, consumerId, namespace, leaseMs, batchSize });

  return async () => {
    await running.stop();
    await consumer.close();
    db.close();
    await closeRedis(redis);
  };
});
