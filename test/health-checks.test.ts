import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { createDatabase } from '../shared/lab/init-stores.js';
import { createLogger } from '../shared/outbox/logger.js';
import { watchDatabase } from '../shared/outbox/store/live-database.js';
import { checkDatabase } from '../shared/runtime/health/checks.js';
import { tempDir } from './helpers/stores.js';

describe("the health check of app.db (checkDatabase, real SQLite files)", () => {
  it("fails naming the lock while another writer holds app.db past the check's wait, passes once it lets go, and leaves the connection's own busy timeout as it was", () => {
    const dir = tempDir();
    createDatabase(dir);
    const watch = watchDatabase(dir, { log: createLogger('test', () => {}), app: 'relay', stopped: 'relaying nothing', pollMs: 3_600_000 });
    const writer = new Database(join(dir, 'app.db'));
    try {
      const { db } = watch.current();
      db.pragma('busy_timeout = 4321');
      writer.exec('BEGIN IMMEDIATE');
      const started = performance.now();
      const locked = checkDatabase(watch, 50);
      const waitedMs = performance.now() - started;
      assert.equal(locked.ok, false);
      assert.equal(locked.reason, 'app.db is locked by another writer for more than 50 ms (SQLITE_BUSY)');
      assert.ok(waitedMs >= 45 && waitedMs < 2000, `the check waited ${waitedMs} ms for the lock, not its 50 ms`);
      assert.equal(db.pragma('busy_timeout', { simple: true }), 4321, 'the check left its own wait on the connection');
      writer.exec('ROLLBACK');
      const free = checkDatabase(watch, 50);
      assert.equal(free.ok, true, free.reason);
      assert.equal(db.pragma('busy_timeout', { simple: true }), 4321);
      // The probe wrote nothing: the writer takes the lock at once.
      writer.pragma('busy_timeout = 0');
      writer.exec('BEGIN IMMEDIATE');
      writer.exec('ROLLBACK');
    } finally {
      writer.close();
      watch.close();
    }
  });
});
