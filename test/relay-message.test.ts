import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { MESSAGE_SQL, toMessage, type OutboxRow } from '../shared/outbox/store/events.js';
import { ensureOutboxTables } from '../shared/outbox/store/schema.js';

// The relay on app.db reads each row's message as SQLite builds it (MESSAGE_SQL); verify and the
// PostgreSQL relay build it with toMessage. `verify` finds a queued message by its text, so the two
// must agree byte for byte, whatever the columns hold.
describe('the message SQLite builds for the relay', () => {
  it('is toMessage\'s text for rows holding quotes, backslashes, every control character, non-BMP and line-separator characters', () => {
    const db = new Database(':memory:');
    try {
      ensureOutboxTables(db);
      const controls = Array.from({ length: 32 }, (_, c) => String.fromCharCode(c)).join('');
      const texts = ['plain', 'quote " and backslash \\\\ \\"', controls, '\u2028\u2029\u007f', 'é ü ß 中文 😀 \u{10ffff}', '</script>', "it's", ' '];
      const insert = db.prepare('INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)');
      texts.forEach((text, i) => {
        insert.run(`id-${i}-${text}`, `order:${text}`, i + 1, `Type${text}`, JSON.stringify({ text, n: i, nested: { list: [text, i / 3] } }), 1_700_000_000_000 + i);
      });
      insert.run('big', 'order:big', Number.MAX_SAFE_INTEGER, 'T', '{}', Number.MAX_SAFE_INTEGER);
      for (const store of ['3f1c2b9e-7a1d-4c55-9f0a-2b6f8e1d4c3a', 'store "with" quotes \\ and \u0001']) {
        const rows = db.prepare<[], OutboxRow>('SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox ORDER BY id').all();
        const built = db.prepare<{ store: string }, { message: string }>(`SELECT ${MESSAGE_SQL} AS message FROM outbox ORDER BY id`).all({ store });
        assert.equal(built.length, texts.length + 1);
        rows.forEach((row, i) => {
          assert.equal(built[i].message, toMessage(row, store), `row ${row.id}`);
          // And it is the JSON the consumer parses.
          assert.equal(JSON.parse(built[i].message).event_id, row.event_id);
        });
      }
    } finally {
      db.close();
    }
  });
});
