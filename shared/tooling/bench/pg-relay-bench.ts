import type { Redis } from 'ioredis';
import { recreatePgLabSchema } from '../../lab/orders/pg-order-service.js';
import { createPgRelay } from '../../outbox/postgres/pg-relay.js';
import { keys } from '../../outbox/redis/keys.js';
import { closeRedis, connectRedis } from '../../outbox/redis/connect.js';
import type { BenchDatabase } from './bench-database.js';
import { machineIdle, processCpuMs, redisCpuMs } from './cpu-time.js';
import { median, timed, type Rate } from './measure.js';
import { progress } from './progress.js';

export interface PgRelayRun {
  relays: number;
  /** Rows marked PUBLISHED per second: all `rows` over the time until every relay found nothing left. */
  published: Rate;
  /** CPU time per published row of that (median) run, µs: this process (the relays), the PostgreSQL server processes of their sessions, Redis; and the share of the whole machine's CPU that stayed idle (0-1). */
  cpu: { clientUs: number; postgresUs: number; redisUs: number; machineIdle: number };
  /** The share of the rows the busiest relay of the median run published (1 / relays when even). */
  busiestShare: number;
}

const RELAYS = [1, 2, 4] as const;

/**
 * New tables holding `rows` PENDING rows as the lab's placeOrder writes them (an order and its OrderPlaced event, seq 1,
 * the same payload), inserted with one INSERT … SELECT each: seeding is not measured.
 */
async function seed(db: BenchDatabase, rows: number): Promise<void> {
  const pool = await db.pool(1);
  try {
    await recreatePgLabSchema(pool);
    await pool.query(`INSERT INTO orders (sku, qty) SELECT 'SKU-' || (i % 50), 1 + i % 5 FROM generate_series(0, ${rows - 1}) AS i`);
    await pool.query(`INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at)
      SELECT gen_random_uuid()::text, 'order:' || id, 1, 'OrderPlaced', format('{"orderId":%s,"sku":"%s","qty":%s}', id, sku, qty), (extract(epoch FROM now()) * 1000)::bigint
        FROM orders ORDER BY id`);
    await pool.query("INSERT INTO outbox_aggregates (aggregate_id, last_seq) SELECT 'order:' || id, 1 FROM orders");
    await pool.query('VACUUM ANALYZE orders, outbox, outbox_aggregates');
  } finally {
    await pool.end();
  }
}

/** Every row PENDING again and the table vacuumed; Redis emptied (the first relay claims it again). Not measured. */
async function reset(db: BenchDatabase, redis: Redis): Promise<void> {
  const pool = await db.pool(1);
  try {
    await pool.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED'");
    await pool.query('VACUUM ANALYZE outbox');
  } finally {
    await pool.end();
  }
  await redis.flushall();
}

/**
 * One run: `count` createPgRelay instances in this process, each with its own pool connection and
 * its own Redis connection, relaying the same `rows` at once to one Redis. Each relay is paired
 * before the clock starts. Checks after: every row PUBLISHED, and exactly `rows` messages in the
 * queue (a row pushed twice would show as more).
 */
async function runOnce(db: BenchDatabase, redisUrl: string, admin: Redis, count: number, rows: number, tick: (n: number) => void): Promise<Omit<PgRelayRun, 'relays'>> {
  await reset(db, admin);
  const pool = await db.pool(count);
  const connections = await Promise.all(Array.from({ length: count }, () => connectRedis(redisUrl)));
  try {
    const relays = connections.map((redis) => createPgRelay(pool, redis, { batchSize: 1000 }));
    for (const relay of relays) await relay.pair();
    const shares = relays.map(() => 0);
    const before = { client: processCpuMs(), postgres: await db.cpuMs(), redis: await redisCpuMs([redisUrl]) };
    const idle = machineIdle();
    const result = await timed(rows, () => Promise.all(relays.map(async (relay, i) => (shares[i] = (await relay.relayAll({ onBatch: (batch) => tick(batch.count) })).events))));
    const perRow = (ms: number) => (ms * 1000) / rows;
    const cpu = { machineIdle: idle(), clientUs: perRow(processCpuMs() - before.client), postgresUs: perRow((await db.cpuMs()) - before.postgres), redisUs: perRow((await redisCpuMs([redisUrl])) - before.redis) };
    const published = Number((await pool.query("SELECT COUNT(*) AS n FROM outbox WHERE status = 'PUBLISHED'")).rows[0].n);
    const queued = await admin.llen(keys.events);
    if (published !== rows || queued !== rows) throw new Error(`${count} relays: ${published} of ${rows} rows PUBLISHED, ${queued} messages in the queue`);
    return { published: result, cpu, busiestShare: Math.max(...shares) / rows };
  } finally {
    await Promise.all(connections.map((redis) => closeRedis(redis)));
    await pool.end();
  }
}

/** The relay on PostgreSQL with 1, 2 and 4 relays at once, `rounds` rounds in alternating order: median of each. */
export async function benchPgRelays(db: BenchDatabase, redisUrl: string, admin: Redis, rows: number, rounds: number): Promise<PgRelayRun[]> {
  await seed(db, rows);
  const bar = progress('scale-out: relays on PostgreSQL', rounds * RELAYS.length * rows);
  const runs = RELAYS.map(() => [] as Omit<PgRelayRun, 'relays'>[]);
  for (let round = 0; round < rounds; round += 1) {
    const order = RELAYS.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) runs[i].push(await runOnce(db, redisUrl, admin, RELAYS[i], rows, (n) => bar.tick(n)));
  }
  bar.finish();
  await admin.flushall();
  return RELAYS.map((relays, i) => {
    const middle = median(runs[i].map((run) => run.published));
    return { relays, ...runs[i].find((run) => run.published === middle)! };
  });
}
