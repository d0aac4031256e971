import type { Redis } from 'ioredis';
import { join } from 'node:path';
import { openDatabase, type Db } from '../../outbox/store/open-database.js';
import { storeIdOf } from '../../outbox/store/store-meta.js';
import { toMessage, type OutboxRow } from '../../outbox/store/events.js';
import { createDatabase } from '../../lab/init-stores.js';
import { createOrderService } from '../../lab/orders/order-service.js';
import { keys } from '../../outbox/redis/keys.js';
import { createRelay } from '../../outbox/relay/relay.js';
import { median, serveStore, timed, type Rate } from './measure.js';
import { progress } from './progress.js';

export interface RelayFigures {
  /** createRelay().relayAll(): batches of 1000, one MULTI and one UPDATE transaction each. */
  relay: Rate;
  /** Raw ioredis: the same messages as RPUSHes of 1000, all sent in one pipeline (no round trip awaited in between), no SQLite at all. */
  rawPush: Rate;
  /** Naive relay: per row SELECT, RPUSH, UPDATE (autocommit). */
  naive: Rate;
}

const ROUNDS = 3;

export function seedPending(db: Db, count: number): void {
  const service = createOrderService(db);
  for (let i = 0; i < count; i += 1000) {
    service.placeOrders(Array.from({ length: Math.min(1000, count - i) }, (_, j) => ({ sku: `SKU-${(i + j) % 50}`, qty: 1 + (j % 5) })));
  }
}

function resetToPending(db: Db): void {
  db.exec("UPDATE outbox SET status = 'PENDING', published_at = NULL");
}

export async function benchRelay(workspace: string, redis: Redis, events: number, naiveEvents: number): Promise<RelayFigures> {
  const dir = join(workspace, 'relay');
  createDatabase(dir);
  const db = openDatabase(dir);
  const bar = progress('relay: PENDING rows to outbox.events', ROUNDS * 2 * events + naiveEvents);
  try {
    seedPending(db, events);
    const storeId = storeIdOf(db);
    const messages = db.prepare<[], OutboxRow>('SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at FROM outbox ORDER BY id').all().map((row) => toMessage(row, storeId));
    await serveStore(redis, db);
    const relay = createRelay(db, redis);
    const ours: Rate[] = [];
    const raw: Rate[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      resetToPending(db);
      await redis.del(keys.events);
      ours.push(await timed(events, () => relay.relayAll()));
      bar.tick(events);

      await redis.del(keys.events);
      raw.push(await timed(events, async () => {
        const pipeline = redis.pipeline();
        for (let i = 0; i < messages.length; i += 1000) pipeline.rpush(keys.events, ...messages.slice(i, i + 1000));
        for (const [error] of (await pipeline.exec())!) if (error) throw error;
      }));
      bar.tick(events);
    }

    resetToPending(db);
    await redis.del(keys.events);
    const selectOne = db.prepare<[], OutboxRow>("SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1");
    const markOne = db.prepare<[number, number]>("UPDATE outbox SET status = 'PUBLISHED', published_at = ? WHERE id = ?");
    const naive = await timed(naiveEvents, async () => {
      for (let i = 0; i < naiveEvents; i += 1) {
        const row = selectOne.get()!;
        await redis.rpush(keys.events, toMessage(row, storeId));
        markOne.run(Date.now(), row.id);
        bar.tick();
      }
    });
    bar.finish();
    await redis.del(keys.events);
    return { relay: median(ours), rawPush: median(raw), naive };
  } finally {
    db.close();
  }
}
