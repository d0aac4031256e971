import { join } from 'node:path';
import type { Redis } from 'ioredis';
import Database from 'better-sqlite3';
import { handlers } from '../../lab/orders/order-handlers.js';
import { orderDatabaseHandlers, reservedInDatabase } from '../../lab/orders/order-database-handlers.js';
import { createConsumer } from '../../outbox/consumer/create-consumer.js';
import { createConsumerDatabase } from '../../outbox/consumer/inbox/consumer-database.js';
import { seededRandom } from '../../lab/random.js';
import { keys } from '../../outbox/redis/keys.js';
import { INVENTORY_KEY } from '../../lab/orders/order-keys.js';
import { median, rate, timed, type Rate } from './measure.js';
import { processCpuMs, redisCpuMs } from './cpu-time.js';
import { applyEventsArgs, sendApplyEvents } from '../../outbox/redis/scripts.js';
import { eventToApply } from '../../outbox/consumer/consumer.js';
import { parseMessage } from '../../outbox/store/parse-message.js';
import { runRedisHandlers } from '../../outbox/consumer/run-redis-handlers.js';
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
  /** CPU time per applied event of the Redis-effects rounds: this process (the consumer) and the Redis server. */
  cpu: { consumerUs: number; redisUs: number };
  /**
   * The apply script's own limit on this Redis: the same messages already in the processing list,
   * the script's arguments built beforehand (the consumer's own code: parse, handlers, packing; each
   * message as bytes, as the take gives them), all calls sent at once, in chunks of 200 as the
   * consumer sends them. Applied (distinct) events.
   */
  scriptLimit: Rate;
  /** The Redis server's CPU time per applied event in the script-limit rounds. */
  scriptRedisUs: number;
  /**
   * The lab's handler set given as a module URL, run on a pool of 2 worker threads (what the
   * consumer app does with a team's handlers), same messages. Applied (distinct) events.
   */
  pool: Rate;
  /** CPU time per applied event of the pool rounds: this process with its worker threads, and Redis. */
  poolCpu: { consumerUs: number; redisUs: number };
}

const ROUNDS = 3;
const DUPLICATE_SHARE = 0.1;
/** Events per apply-events call, as the consumer sends them (consumer.ts). */
const APPLY_CHUNK = 200;
const LAB_HANDLERS_MODULE = new URL('../../lab/orders/order-handlers.js', import.meta.url);

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
export async function benchConsumer(redis: Redis, redisUrl: string, workspace: string, events: number, naiveEvents: number): Promise<ConsumerFigures> {
  const messages = benchMessages(events);
  const expected = expectedReserved(events);
  const bar = progress('consumer: dedupe + effect + ack', 4 * ROUNDS * messages.length + naiveEvents);
  let done = 0;
  const ours: Rate[] = [];
  const cpu = { consumerMs: 0, redisMs: 0 };
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const consumer = await createConsumer({ redis, handlers, consumerId: 'bench', batchSize: 1000 });
    const [consumerBefore, redisBefore] = [processCpuMs(), await redisCpuMs([redisUrl])];
    ours.push(await timed(events, () => consumer.drain((stats) => bar.set(done + stats.received))));
    cpu.consumerMs += processCpuMs() - consumerBefore;
    cpu.redisMs += (await redisCpuMs([redisUrl])) - redisBefore;
    done += messages.length;
    await appliedCount(redis, events, 'Redis effects');
    const inventory = await redis.hgetall(INVENTORY_KEY);
    checkReserved('the consumer (Redis effects)', new Map(Object.entries(inventory).map(([sku, qty]) => [sku, Number(qty)])), expected);
  }
  const ourMedian = median(ours);

  // The script's own limit: its arguments built before the clock starts, then every call sent at once.
  const limit: Rate[] = [];
  let scriptRedisMs = 0;
  const processingList = keys.processing('bench');
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    for (let i = 0; i < messages.length; i += 1000) await redis.rpush(processingList, ...messages.slice(i, i + 1000));
    const calls: (string | Buffer)[][] = [];
    for (let i = 0; i < messages.length; i += APPLY_CHUNK) {
      const chunk = messages.slice(i, i + APPLY_CHUNK);
      const parsed = chunk.map((raw) => parseMessage(raw));
      const results = runRedisHandlers(handlers, parsed);
      calls.push(applyEventsArgs(redis, processingList, chunk.map((raw, j) => {
        const result = results[j];
        if (!('effects' in result)) throw new Error(`the lab's handler refused bench event ${parsed[j].eventId}`);
        // As the consumer sends it: the bytes the take gave it.
        return eventToApply(Buffer.from(raw), parsed[j], result.effects);
      }), 7 * 24 * 3600));
    }
    const redisBefore = await redisCpuMs([redisUrl]);
    limit.push(await timed(events, () => Promise.all(calls.map((args) => sendApplyEvents(redis, args)))));
    scriptRedisMs += (await redisCpuMs([redisUrl])) - redisBefore;
    done += messages.length;
    bar.set(done);
    await appliedCount(redis, events, 'script limit');
  }

  // A team's handlers as the consumer app runs them: a module on worker threads.
  const inPool: Rate[] = [];
  const poolCpu = { consumerMs: 0, redisMs: 0 };
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const consumer = await createConsumer({ redis, handlers: LAB_HANDLERS_MODULE, threads: 2, consumerId: 'bench', batchSize: 1000 });
    try {
      const [consumerBefore, redisBefore] = [processCpuMs(), await redisCpuMs([redisUrl])];
      inPool.push(await timed(events, () => consumer.drain((stats) => bar.set(done + stats.received))));
      poolCpu.consumerMs += processCpuMs() - consumerBefore;
      poolCpu.redisMs += (await redisCpuMs([redisUrl])) - redisBefore;
    } finally {
      await consumer.close();
    }
    done += messages.length;
    await appliedCount(redis, events, 'handler module on worker threads');
  }

  const inDatabase: Rate[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const path = join(workspace, `consumer-bench-${round}.db`);
    createConsumerDatabase(path).close();
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
  const perEvent = (ms: number) => (ms * 1000) / (ROUNDS * events);
  return {
    consumer: ourMedian,
    consumerMessages: rate(messages.length, ourMedian.ms),
    database: databaseMedian,
    databaseMessages: rate(messages.length, databaseMedian.ms),
    naive,
    duplicateShare: DUPLICATE_SHARE,
    cpu: { consumerUs: perEvent(cpu.consumerMs), redisUs: perEvent(cpu.redisMs) },
    scriptLimit: median(limit),
    scriptRedisUs: perEvent(scriptRedisMs),
    pool: median(inPool),
    poolCpu: { consumerUs: perEvent(poolCpu.consumerMs), redisUs: perEvent(poolCpu.redisMs) },
  };
}
