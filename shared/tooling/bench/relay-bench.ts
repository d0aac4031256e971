import type { Redis } from 'ioredis';
import { join } from 'node:path';
import { openDatabase, type Db } from '../../outbox/store/open-database.js';
import { storeIdOf } from '../../outbox/store/store-meta.js';
import { toMessage, type OutboxRow } from '../../outbox/store/events.js';
import { createDatabase } from '../../lab/init-stores.js';
import { createOrderService } from '../../lab/orders/order-service.js';
import { keys } from '../../outbox/redis/keys.js';
import { createRelay } from '../../outbox/relay/relay.js';
import { relayStatements } from '../../outbox/relay/relay-statements.js';
import { median, serveStore, timed, type Rate } from './measure.js';
import { processCpuMs, redisCpuMs } from './cpu-time.js';
import { progress } from './progress.js';

export interface RelayFigures {
  /** createRelay().relayAll(): batches of 1000, one MULTI and one UPDATE transaction each. */
  relay: Rate;
  /** Raw ioredis: the same messages as RPUSHes of 1000, all sent in one pipeline (no round trip awaited in between), no SQLite at all. */
  rawPush: Rate;
  /** Naive relay: per row SELECT, RPUSH, UPDATE (autocommit). */
  naive: Rate;
  /**
   * The relay's SQLite bound: its own two statements (relayStatements) on the same rows, batches
   * of 1000, one IMMEDIATE transaction per mark, no Redis and no message built: what reading and
   * marking alone allow.
   */
  sqliteBound: Rate;
  /** CPU time per event of the relay rounds: this process (the relay) and the Redis server. */
  cpu: { relayUs: number; redisUs: number };
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

export async function benchRelay(workspace: string, redis: Redis, redisUrl: string, events: number, naiveEvents: number): Promise<RelayFigures> {
  const dir = join(workspace, 'relay');
  createDatabase(dir);
  const db = openDatabase(dir);
  const bar = progress('relay: PENDING rows to outbox.events', ROUNDS * 3 * events + naiveEvents);
  try {
    seedPending(db, events);
    const storeId = storeIdOf(db);
    const messages = db.prepare<[], OutboxRow>('SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox ORDER BY id').all().map((row) => toMessage(row, storeId));
    await serveStore(redis, db);
    const relay = createRelay(db, redis);
    const { selectPending, markRows } = relayStatements(db);
    const markBatch = db.transaction((ids: string) => markRows.run(Date.now(), ids));
    const readAndMark = () => {
      for (let last = 0; ; ) {
        const rows = selectPending.all({ store: storeId, after: last, limit: 1000 });
        if (rows.length === 0) return;
        markBatch.immediate(JSON.stringify(rows.map((row) => row.id)));
        last = rows[rows.length - 1].id;
      }
    };
    const ours: Rate[] = [];
    const raw: Rate[] = [];
    const bound: Rate[] = [];
    const cpu = { relayMs: 0, redisMs: 0 };
    for (let round = 0; round < ROUNDS; round += 1) {
      // The bound and the relay take turns going first: neither always meets a cold cache.
      const boundFirst = round % 2 === 1;
      if (boundFirst) {
        resetToPending(db);
        bound.push(await timed(events, readAndMark));
      }
      resetToPending(db);
      await redis.del(keys.events);
      const [relayBefore, redisBefore] = [processCpuMs(), await redisCpuMs([redisUrl])];
      ours.push(await timed(events, () => relay.relayAll()));
      cpu.relayMs += processCpuMs() - relayBefore;
      cpu.redisMs += (await redisCpuMs([redisUrl])) - redisBefore;
      if ((await redis.llen(keys.events)) !== events) throw new Error(`the relay pushed ${await redis.llen(keys.events)} of ${events} rows`);
      bar.tick(events);
      if (!boundFirst) {
        resetToPending(db);
        bound.push(await timed(events, readAndMark));
      }
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
    const selectOne = db.prepare<[], OutboxRow>("SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1");
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
    const perEvent = (ms: number) => (ms * 1000) / (ROUNDS * events);
    return { relay: median(ours), rawPush: median(raw), naive, sqliteBound: median(bound), cpu: { relayUs: perEvent(cpu.relayMs), redisUs: perEvent(cpu.redisMs) } };
  } finally {
    db.close();
  }
}
