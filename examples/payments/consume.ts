// The payments consumer: drains outbox.events into the ledger in its own SQLite file, in database
// mode, then prints its counters as JSON. Usage: REDIS_URL=... node consume.js <ledger.db>
// (LEASE_MS and BATCH_SIZE optional.)
import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { connectRedis, createConsumer } from 'outbox';
import { ledgerHandlers, LEDGER_SCHEMA } from './ledger.js';

const [path] = process.argv.slice(2);
if (!path || !process.env.REDIS_URL) {
  process.stderr.write('usage: REDIS_URL=redis://... node consume.js <ledger.db>\n');
  process.exit(2);
}
// The consumer's own database, opened here (so its tables exist before the first event): WAL, and a
// busy timeout for the other consumers that share the file.
// Never created here (init-ledger.js makes it once): a missing ledger is refused, exit 5.
if (!existsSync(path)) {
  process.stderr.write(`no ledger at ${path}: run "node dist/examples/payments/init-ledger.js ${path}" the first time, or rebuild a lost one with "outbox verify --repair --consumer-db ${path}"\n`);
  process.exit(5);
}
const db = new Database(path, { fileMustExist: true });
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.pragma('busy_timeout = 5000');
db.exec(LEDGER_SCHEMA);
const redis = await connectRedis(process.env.REDIS_URL);
const consumer = await createConsumer({
  redis,
  handlers: ledgerHandlers,
  database: db,
  consumerId: 'payments',
  leaseMs: Number(process.env.LEASE_MS ?? 30_000),
  batchSize: Number(process.env.BATCH_SIZE ?? 1000),
  onProblem: (problem) => process.stderr.write(`problem: ${problem}\n`),
});
try {
  process.stdout.write(`${JSON.stringify(await consumer.drain())}\n`);
} finally {
  await consumer.close();
  db.close();
  redis.disconnect();
}
