import Database from 'better-sqlite3';
import type { Redis } from 'ioredis';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { databasePath } from './config.js';
import { configure } from './db/open-database.js';
import { createSchema } from './db/schema.js';
import { ConflictError } from './errors/conflict-error.js';
import { projectKeyPatterns } from './redis/keys.js';
import { keyPrefixOfConnection, scanKeys } from './redis/scan-keys.js';

/** Refuses, before anything is touched, to overwrite an existing database without `force`. */
export function assertCanInit(dir: string, force: boolean): void {
  const path = databasePath(dir);
  if (existsSync(path) && !force) {
    throw new ConflictError(`${path} already exists: pass --force to wipe it and start over (this deletes every order and event)`);
  }
}

/** Creates `<dir>/app.db` with the schema, deleting any previous database files first. */
export function createDatabase(dir: string): string {
  const path = databasePath(dir);
  mkdirSync(dir, { recursive: true });
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(path + suffix, { force: true });
  const db = configure(new Database(path));
  try {
    createSchema(db);
  } finally {
    db.close();
  }
  return path;
}

/** Every key this project owns in the connection's namespace (and no other), without the prefix. */
async function* projectKeys(redis: Redis): AsyncGenerator<string> {
  for (const pattern of projectKeyPatterns(keyPrefixOfConnection(redis))) yield* scanKeys(redis, pattern);
}

/** Deletes every key this project owns in the connection's namespace (and no other); resolves how many. */
export async function clearProjectKeys(redis: Redis): Promise<number> {
  let deleted = 0;
  let batch: string[] = [];
  for await (const key of projectKeys(redis)) {
    batch.push(key);
    if (batch.length === 1000) {
      deleted += await redis.unlink(...batch);
      batch = [];
    }
  }
  if (batch.length > 0) deleted += await redis.unlink(...batch);
  return deleted;
}

/** What `init --force` would delete: the rows of an existing app.db and this project's Redis keys. */
export interface WipePlan {
  /** Rows per table of the existing app.db; null when there is none, `unreadable` when it is not an outbox database. */
  rows: { orders: number; outbox: number; outbox_pruned: number } | 'unreadable' | null;
  keys: number;
  /** The first keys, sorted, up to `shown`. */
  firstKeys: string[];
}

export async function planWipe(dir: string, redis: Redis, shown: number): Promise<WipePlan> {
  let keys = 0;
  const all: string[] = [];
  for await (const key of projectKeys(redis)) {
    keys += 1;
    if (all.length < 10_000) all.push(key);
  }
  return { rows: countRows(dir), keys, firstKeys: all.sort().slice(0, shown) };
}

/** Counts app.db's rows, read-only; never creates or changes the file. */
function countRows(dir: string): WipePlan['rows'] {
  const path = databasePath(dir);
  if (!existsSync(path)) return null;
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true });
    try {
      const count = (table: string) => db.prepare(`SELECT COUNT(*) FROM ${table}`).pluck().get() as number;
      return { orders: count('orders'), outbox: count('outbox'), outbox_pruned: count('outbox_pruned') };
    } finally {
      db.close();
    }
  } catch {
    return 'unreadable';
  }
}
