// The payments consumer: drains outbox.events into the ledger in its own SQLite file, in database
// mode, then prints its counters as JSON. Usage: REDIS_URL=... node consume.js <ledger.db>
// (LEASE_MS and BATCH_SIZE optional.)
import { connectRedis } from '../../shared/outbox/index.js';
import { createDatabaseConsumer } from '../../shared/outbox/consumer/inbox/database-consumer.js';
import { deliverPayment, LEDGER_SCHEMA } from './ledger.js';

const [path] = process.argv.slice(2);
if (!path || !process.env.REDIS_URL) {
  process.stderr.write('usage: REDIS_URL=redis://... node consume.js <ledger.db>\n');
  process.exit(2);
}
const redis = await connectRedis(process.env.REDIS_URL);
const consumer = createDatabaseConsumer(redis, {
  database: path,
  deliver: deliverPayment,
  consumerId: 'payments',
  leaseMs: Number(process.env.LEASE_MS ?? 30_000),
  batchSize: Number(process.env.BATCH_SIZE ?? 1000),
  onProblem: (problem) => process.stderr.write(`problem: ${problem}\n`),
});
consumer.db.exec(LEDGER_SCHEMA);
try {
  process.stdout.write(`${JSON.stringify(await consumer.drain())}\n`);
} finally {
  consumer.close();
  redis.disconnect();
}
