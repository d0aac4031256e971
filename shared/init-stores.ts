import Database from 'better-sqlite3';
import type { Redis } from 'ioredis';
import { existsSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { databasePath } from './config.js';
import { configure } from './db/open-database.js';
import { createSchema } from './db/schema.js';
import { ConflictError } from './errors/conflict-error.js';
import { InvalidInputError } from './errors/invalid-input-error.js';
import { StoreUnavailableError } from './errors/store-unavailable-error.js';
import { projectKeyPatterns } from './redis/keys.js';
import { keyPrefixOfConnection, scanKeys } from './redis/scan-keys.js';

/** Refuses, before anything is touched, to overwrite an existing database without `force`. */
export function assertCanInit(dir: string, force: boolean): void {
  const path = databasePath(dir);
  if (existsSync(path) && !force) {
    throw new ConflictError(`${path} already exists: pass --force to wipe it and start over (this deletes every order and event)`);
  }
}

/**
 * Creates `<dir>/app.db` with the schema, deleting any previous database files first. A `dir` that
 * is not a directory is bad input (exit 2); a directory where the file cannot be made (permissions,
 * read-only or full disk) a `StoreUnavailableError` (exit 5); either before anything was deleted.
 */
export function createDatabase(dir: string): string {
  const path = databasePath(dir);
  assertDirectory(dir);
  try {
    mkdirSync(dir, { recursive: true });
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(path + suffix, { force: true });
    const db = configure(new Database(path));
    try {
      createSchema(db);
    } finally {
      db.close();
    }
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    throw new StoreUnavailableError(`cannot create ${path} (${code ?? message}): check that ${dir} is writable and its disk has room`);
  }
  return path;
}

/** `dir` must be a directory or not exist yet (then no parent of it may be a file). */
function assertDirectory(dir: string): void {
  let stats;
  try {
    stats = statSync(dir, { throwIfNoEntry: false });
  } catch {
    // ENOTDIR: a parent is a file
    throw new InvalidInputError(`--dir ${dir} is not a directory (a parent of it is a file): pass a directory (it is created when missing)`);
  }
  if (stats && !stats.isDirectory()) {
    throw new InvalidInputError(`--dir ${dir} is a file, not a directory: pass a directory (it is created when missing)`);
  }
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
