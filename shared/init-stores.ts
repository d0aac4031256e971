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

/** Deletes every key this project owns in the connection's namespace (and no other); resolves how many. */
export async function clearProjectKeys(redis: Redis): Promise<number> {
  let deleted = 0;
  for (const pattern of projectKeyPatterns(keyPrefixOfConnection(redis))) {
    let batch: string[] = [];
    for await (const key of scanKeys(redis, pattern)) {
      batch.push(key);
      if (batch.length === 1000) {
        deleted += await redis.unlink(...batch);
        batch = [];
      }
    }
    if (batch.length > 0) deleted += await redis.unlink(...batch);
  }
  return deleted;
}
