import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { explainError } from '../shared/outbox/errors/explain-error.js';

describe('explainError', () => {
  it('passes over an error whose code is not a string (BullMQ lock errors carry numbers) instead of throwing', () => {
    assert.equal(explainError(Object.assign(new Error('could not renew lock for job 1'), { code: -2 })), null);
    assert.equal(explainError({ message: 'odd', code: { nested: true } }), null);
  });

  it('still explains a locked or full app.db by its SQLite code', () => {
    assert.match(explainError(new Database.SqliteError('database is locked', 'SQLITE_BUSY'))!.message, /app\.db is locked by another writer \(SQLITE_BUSY\)/);
    assert.match(explainError(new Database.SqliteError('database or disk is full', 'SQLITE_FULL'))!.message, /app\.db's disk is full/);
  });
});
