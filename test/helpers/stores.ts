import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { OutboxRow } from '../../shared/outbox/store/events.js';

const created: string[] = [];
process.on('exit', () => {
  for (const dir of created) rmSync(dir, { recursive: true, force: true });
});

/** A new empty directory, removed when the test process exits. */
export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-test-'));
  created.push(dir);
  return dir;
}

/** Opens app.db read-only for assertions. */
export function readDb(dir: string): Database.Database {
  return new Database(join(dir, 'app.db'), { readonly: true, fileMustExist: true });
}

/** The store id `outbox init` gave `<dir>/app.db`. */
export function storeIdIn(dir: string): string {
  const db = readDb(dir);
  try {
    return db.prepare("SELECT value FROM outbox_meta WHERE key = 'store_id'").pluck().get() as string;
  } finally {
    db.close();
  }
}

/** The outbox row of `aggregate`'s event at `seq` in `<dir>/app.db`. */
export function outboxRowOf(dir: string, aggregate: string, seq: number): OutboxRow {
  const db = readDb(dir);
  try {
    return db.prepare('SELECT * FROM outbox WHERE aggregate_id = ? AND seq = ?').get(aggregate, seq) as OutboxRow;
  } finally {
    db.close();
  }
}

export function count(dir: string, sql: string, ...params: unknown[]): number {
  const db = readDb(dir);
  try {
    return Object.values(db.prepare(sql).get(...params) as Record<string, number>)[0];
  } finally {
    db.close();
  }
}

/** Everything in the SQLite file and in Redis, to prove a failed command changed nothing. */
export async function snapshotStores(dir: string, redisUrl: string): Promise<string> {
  const path = join(dir, 'app.db');
  let sqlite = 'no app.db';
  if (existsSync(path)) {
    try {
      const db = readDb(dir);
      try {
        sqlite = JSON.stringify([db.prepare('SELECT * FROM orders').all(), db.prepare('SELECT * FROM outbox').all()]);
      } finally {
        db.close();
      }
    } catch {
      sqlite = readFileSync(path, 'base64');
    }
  }
  const redis = new Redis(redisUrl);
  try {
    const keys = (await redis.keys('*')).sort();
    const values = await Promise.all(
      keys.map(async (key) => {
        const type = await redis.type(key);
        if (type === 'list') return [key, await redis.lrange(key, 0, -1)];
        if (type === 'hash') return [key, await redis.hgetall(key)];
        return [key, type, await redis.dump(key)];
      }),
    );
    return JSON.stringify({ sqlite, redis: values });
  } finally {
    redis.disconnect();
  }
}
