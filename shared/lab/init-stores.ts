import Database from 'better-sqlite3';
import type { Redis } from 'ioredis';
import { closeSync, existsSync, mkdirSync, openSync, rmSync, statSync } from 'node:fs';
import { databasePath } from '../outbox/config.js';
import { configure } from '../outbox/store/open-database.js';
import { ConflictError } from '../outbox/errors/conflict-error.js';
import { InvalidInputError } from '../outbox/errors/invalid-input-error.js';
import { StoreUnavailableError } from '../outbox/errors/store-unavailable-error.js';
import { projectKeys } from '../outbox/redis/project-keys.js';
import { partitionsOf, partitionTag, type Partitions } from '../outbox/redis/partitions.js';
import { isCluster } from '../outbox/redis/cluster-client.js';
import { createLabSchema } from './orders/orders-schema.js';

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
    // A data dir made here, and its missing parents, are 0700; app.db is 0600 before SQLite opens it,
    // and SQLite gives -wal and -shm the mode of the database.
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(path + suffix, { force: true });
    closeSync(openSync(path, 'wx', 0o600));
    const db = configure(new Database(path));
    try {
      createLabSchema(db);
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

/** What `init --force` would delete: the rows of an existing app.db and this project's Redis keys. */
export interface WipePlan {
  /** Rows per table of the existing app.db; null when there is none, `unreadable` when it is not an outbox database. */
  rows: { orders: number; outbox: number; outbox_pruned: number } | 'unreadable' | null;
  keys: number;
  /** The first keys, sorted, up to `shown`. */
  firstKeys: string[];
}

/** `rows`: counted by the caller (the PostgreSQL store), else app.db's in `dir`. */
export async function planWipe(dir: string, redis: Redis | Partitions, shown: number, rows: WipePlan['rows'] = countRows(dir)): Promise<WipePlan> {
  let keys = 0;
  const all: string[] = [];
  const { count, clients } = partitionsOf(redis);
  for (const [index, client] of clients.entries()) {
    // Shown with the partition's tag: the same name in two partitions is two keys.
    const tag = partitionTag(index, count, isCluster(client));
    for await (const key of projectKeys(client)) {
      keys += 1;
      if (all.length < 10_000) all.push(tag + key);
    }
  }
  return { rows, keys, firstKeys: all.sort().slice(0, shown) };
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
