import { join } from 'node:path';
import type { Redis } from 'ioredis';
import Database from 'better-sqlite3';
import { handlers } from '../../lab/orders/order-handlers.js';
import { orderDatabaseHandlers, reservedInDatabase } from '../../lab/orders/order-database-handlers.js';
import { createConsumer } from '../../outbox/consumer/create-consumer.js';
import { seededRandom } from '../../lab/random.js';
import { keys } from '../../outbox/redis/keys.js';
import { INVENTORY_KEY } from '../../lab/orders/order-keys.js';
import { median, rate, timed, type Rate } from './measure.js';
import { progress } from './progress.js';

export interface ConsumerFigures {
  /**
   * createConsumer({ handlers: the lab's }).drain(): LMOVE batches, the lab's handler set (Redis
   * effects as data) in this thread, the atomic apply script per chunk. Counted in
   * applied (distinct) events: the re-deliveries it absorbs on the way are not counted.
   */
  consumer: Rate;
  /** The same run counted in messages taken, re-deliveries included. */
  consumerMessages: Rate;
  /**
   * The same messages through createConsumer({ handlers: the lab's database set, database: a new
   * SQLite file }).drain(): claim, the handler's reservation rows with the inbox row in one
   * transaction of the consumer's own database, complete. Applied (distinct) events.
   */
  database: Rate;
  /** The database-mode run counted in messages taken, re-deliveries included. */
  databaseMessages: Rate;
  /** Naive consumer: per message LPOP, SET NX, HSET processed, HINCRBY inventory; applied (distinct) events too. */
  naive: Rate;
  duplicateShare: number;
}

const ROUNDS = 3;
const DUPLICATE_SHARE = 0.1;

/** The store the bench's messages come from, which its Redis is made to serve. */
export const BENCH_STORE = 'bench';

/** The distinct event `i` of the bench: order `i + 1` placed, 50 SKUs, quantities 1-5. */
function original(i: number) {
  return { event_id: `bench-${i}`, aggregate_id: `order:${i + 1}`, seq: 1, event_type: 'OrderPlaced', payload: { orderId: i + 1, sku: `SKU-${i % 50}`, qty: 1 + (i % 5) }, store_id: BENCH_STORE };
}

/** `events` distinct OrderPlaced messages plus 10 % re-deliveries placed later in the queue. */
export function benchMessages(events: number): string[] {
  const random = seededRandom(5);
  const originals = Array.from({ length: events }, (_, i) => JSON.stringify(original(i)));
  // A re-delivery lands somewhere after its original: sort by a key drawn after the original's.
  const keyed = originals.map((message, i) => ({ key: i, message }));
  for (let d = 0; d < Math.round(events * DUPLICATE_SHARE); d += 1) {
    const original = Math.floor(random() * events);
    keyed.push({ key: original + 0.5 + random() * (events - original), message: originals[original] });
  }
  return keyed.sort((a, b) => a.key - b.key).map((k) => k.message);
}

/** SKU -> reserved quantity the distinct events add up to: what either mode's effect must hold. */
export function expectedReserved(events: number): Map<string, number> {
  const reserved = new Map<string, number>();
  for (let i = 0; i < events; i += 1) {
    const { sku, qty } = original(i).payload;
    reserved.set(sku, (reserved.get(sku) ?? 0) + qty);
  }
  return reserved;
}

/** Throws unless `actual` holds exactly the expected reservation per SKU. */
export function checkReserved(where: string, actual: Map<string, number>, expected: Map<string, number>): void {
  const wrong = [...new Set([...expected.keys(), ...actual.keys()])].filter((sku) => actual.get(sku) !== expected.get(sku));
  if (wrong.length > 0) throw new Error(`${where}: ${wrong.length} SKUs reserved wrong, e.g. ${wrong[0]}: ${actual.get(wrong[0])} instead of ${expected.get(wrong[0])}`);
}

/**
 * Everything the previous round left (markers, claims, processed, apply counts, effect keys, stats):
 * it is the bench's own redis-server, so all of it. Outside the timed part.
 */
async function clearConsumerState(redis: Redis): Promise<void> {
  await redis.flushall();
  await redis.hset(keys.meta, 'store', BENCH_STORE);
}

async function fill(redis: Redis, messages: string[]): Promise<void> {
  for (let i = 0; i < messages.length; i += 1000) await redis.rpush(keys.events, ...messages.slice(i, i + 1000));
}

async function appliedCount(redis: Redis, events: number, mode: string): Promise<void> {
  const applied = Number(await redis.hget(keys.stats, 'applied'));
  if (applied !== events) throw new Error(`the consumer (${mode}) applied ${applied} of ${events} unique events`);
}

/** The database-mode round's file: one inbox row, one reservation row per distinct event, the totals right. */
function checkDatabase(path: string, events: number, expected: Map<string, number>): void {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const inbox = db.prepare('SELECT COUNT(*) FROM outbox_inbox').pluck().get() as number;
    const reservations = db.prepare('SELECT COUNT(*) FROM reservations').pluck().get() as number;
    if (inbox !== events || reservations !== events) throw new Error(`the consumer (database) wrote ${inbox} inbox rows and ${reservations} reservations for ${events} unique events`);
    checkReserved('the consumer (database)', reservedInDatabase(db), expected);
  } finally {
    db.close();
  }
}

/**
 * The consumer through the public createConsumer in both effect modes, on the same messages,
 * ROUNDS rounds each (median), each round on a cleared Redis (and, in database mode, a new file
 * in `workspace`); then the naive consumer.
 */
export async function benchConsumer(redis: Redis, workspace: string, events: number, naiveEvents: number): Promise<ConsumerFigures> {
  const messages = benchMessages(events);
  const expected = expectedReserved(events);
  const bar = progress('consumer: dedupe + effect + ack', 2 * ROUNDS * messages.length + naiveEvents);
  let done = 0;
  const ours: Rate[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const consumer = await createConsumer({ redis, handlers, consumerId: 'bench', batchSize: 1000 });
    ours.push(await timed(events, () => consumer.drain((stats) => bar.set(done + stats.received))));
    done += messages.length;
    await appliedCount(redis, events, 'Redis effects');
    const inventory = await redis.hgetall(INVENTORY_KEY);
    checkReserved('the consumer (Redis effects)', new Map(Object.entries(inventory).map(([sku, qty]) => [sku, Number(qty)])), expected);
  }
  const ourMedian = median(ours);

  const inDatabase: Rate[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const path = join(workspace, `consumer-bench-${round}.db`);
    const consumer = await createConsumer({ redis, handlers: orderDatabaseHandlers, database: path, consumerId: 'bench', batchSize: 1000 });
    try {
      inDatabase.push(await timed(events, () => consumer.drain((stats) => bar.set(done + stats.received))));
    } finally {
      await consumer.close();
    }
    done += messages.length;
    await appliedCount(redis, events, 'database');
    checkDatabase(path, events, expected);
  }
  const databaseMedian = median(inDatabase);

  await clearConsumerState(redis);
  await fill(redis, benchMessages(naiveEvents));
  bar.set(done);
  const naive = await timed(naiveEvents, async () => {
    for (;;) {
      const raw = await redis.lpop(keys.events);
      if (raw === null) break;
      const event = JSON.parse(raw);
      if ((await redis.set(keys.seen(event.event_id), '1', 'NX')) === 'OK') {
        await redis.hset(keys.processed, event.event_id, raw);
        await redis.hincrby(INVENTORY_KEY, event.payload.sku, event.payload.qty);
      }
      bar.tick();
    }
  });
  bar.finish();
  await clearConsumerState(redis);
  return {
    consumer: ourMedian,
    consumerMessages: rate(messages.length, ourMedian.ms),
    database: databaseMedian,
    databaseMessages: rate(messages.length, databaseMedian.ms),
    naive,
    duplicateShare: DUPLICATE_SHARE,
  };
}
