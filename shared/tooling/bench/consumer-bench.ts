import type { Redis } from 'ioredis';
import { handlers } from '../../lab/orders/order-handlers.js';
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
  /** Naive consumer: per message LPOP, SET NX, HSET processed, HINCRBY inventory; applied (distinct) events too. */
  naive: Rate;
  duplicateShare: number;
}

const ROUNDS = 3;
const DUPLICATE_SHARE = 0.1;

/** The store the bench's messages come from, which its Redis is made to serve. */
const BENCH_STORE = 'bench';

/** `events` distinct OrderPlaced messages plus 10 % re-deliveries placed later in the queue. */
export function benchMessages(events: number): string[] {
  const random = seededRandom(5);
  const originals = Array.from({ length: events }, (_, i) =>
    JSON.stringify({ event_id: `bench-${i}`, aggregate_id: `order:${i + 1}`, seq: 1, event_type: 'OrderPlaced', payload: { orderId: i + 1, sku: `SKU-${i % 50}`, qty: 1 + (i % 5) }, store_id: BENCH_STORE }),
  );
  // A re-delivery lands somewhere after its original: sort by a key drawn after the original's.
  const keyed = originals.map((message, i) => ({ key: i, message }));
  for (let d = 0; d < Math.round(events * DUPLICATE_SHARE); d += 1) {
    const original = Math.floor(random() * events);
    keyed.push({ key: original + 0.5 + random() * (events - original), message: originals[original] });
  }
  return keyed.sort((a, b) => a.key - b.key).map((k) => k.message);
}

async function clearConsumerState(redis: Redis): Promise<void> {
  let cursor = '0';
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', 'outbox:seen:*', 'COUNT', 10_000);
    if (found.length > 0) await redis.unlink(...found);
    cursor = next;
  } while (cursor !== '0');
  await redis.unlink(keys.events, keys.processed, keys.appliedSeq, INVENTORY_KEY, keys.stats, keys.parked, keys.processing('bench'));
  await redis.hset(keys.meta, 'store', BENCH_STORE);
}

async function fill(redis: Redis, messages: string[]): Promise<void> {
  for (let i = 0; i < messages.length; i += 1000) await redis.rpush(keys.events, ...messages.slice(i, i + 1000));
}

export async function benchConsumer(redis: Redis, events: number, naiveEvents: number): Promise<ConsumerFigures> {
  const messages = benchMessages(events);
  const bar = progress('consumer: dedupe + effect + ack', ROUNDS * messages.length + naiveEvents);
  const ours: Rate[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    await clearConsumerState(redis);
    await fill(redis, messages);
    const consumer = await createConsumer({ redis, handlers, consumerId: 'bench', batchSize: 1000 });
    ours.push(await timed(events, () => consumer.drain((stats) => bar.set(round * messages.length + stats.received))));
    const applied = Number(await redis.hget(keys.stats, 'applied'));
    if (applied !== events) throw new Error(`the consumer applied ${applied} of ${events} unique events`);
  }
  const ourMedian = median(ours);

  await clearConsumerState(redis);
  await fill(redis, benchMessages(naiveEvents));
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
  return { consumer: ourMedian, consumerMessages: rate(messages.length, ourMedian.ms), naive, duplicateShare: DUPLICATE_SHARE };
}
