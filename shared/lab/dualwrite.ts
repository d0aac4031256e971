import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { configure } from '../outbox/store/open-database.js';
import { keys } from '../outbox/redis/keys.js';

export interface DualWriteResult {
  /** Orders in the scratch store after the run. */
  orders: number;
  /** Events on the dual-write list after the run. */
  published: number;
  /** The publish error that caused the difference. */
  failure: string;
  /** The lines of dualwrite.out. */
  lines: string[];
}

export const DUALWRITE_DB = 'dualwrite.db';

/**
 * The bug the outbox removes: save the order (commit), then publish the event as a second write.
 * The first `count - 1` publishes succeed; before the last one the broker connection really drops
 * (CLIENT KILL, no reconnect), so the order is committed and its event is lost. Uses its own
 * scratch store and list, so app.db and outbox.events are untouched.
 */
export async function dualWrite(dir: string, redis: Redis, url: string, count = 3): Promise<DualWriteResult> {
  const path = join(dir, DUALWRITE_DB);
  for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
  await redis.del(keys.dualwriteEvents);

  const db = configure(new Database(path));
  const publisher = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
  publisher.on('error', () => {});
  let failure = 'no publish failed';
  try {
    db.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL)');
    const save = db.prepare<[string, number]>('INSERT INTO orders (sku, qty) VALUES (?, ?)');
    await publisher.connect();
    for (let i = 1; i <= count; i += 1) {
      const id = Number(save.run(`SKU-${i}`, 1).lastInsertRowid);
      if (i === count) {
        const closed = new Promise((resolve) => publisher.once('end', resolve));
        await redis.client('KILL', 'ID', String(await publisher.client('ID')));
        await closed;
      }
      try {
        await publisher.rpush(keys.dualwriteEvents, JSON.stringify({ type: 'OrderPlaced', orderId: id, sku: `SKU-${i}`, qty: 1 }));
      } catch (error) {
        failure = `order ${id} was saved, then publishing its event failed: ${(error as Error).message}`;
      }
    }
    const orders = db.prepare<[], { n: number }>('SELECT COUNT(*) AS n FROM orders').get()!.n;
    const published = await redis.llen(keys.dualwriteEvents);
    const verdict = orders === published ? 'CONSISTENT' : 'INCONSISTENT';
    return { orders, published, failure, lines: [`${verdict} orders=${orders} published=${published}`, failure] };
  } finally {
    publisher.disconnect();
    db.close();
  }
}
