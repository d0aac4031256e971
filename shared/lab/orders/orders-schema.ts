import type { Database } from 'better-sqlite3';
import { ensureOutboxTables } from '../../outbox/store/schema.js';

// The lab's own table. An order's last event seq is not kept here: `append` assigns it from the
// library's outbox_aggregates row of `order:<id>`.
const ORDERS = `
CREATE TABLE orders (
  id      INTEGER PRIMARY KEY,
  sku     TEXT    NOT NULL CHECK (length(sku) > 0),
  qty     INTEGER NOT NULL CHECK (qty > 0),
  status  TEXT    NOT NULL DEFAULT 'PLACED' CHECK (status IN ('PLACED', 'CANCELLED'))
);
`;

/**
 * Creates the lab's app.db tables (orders, then the library's) in an empty database; leaves any
 * other database alone. Safe when several processes race on a new file: the IMMEDIATE transaction
 * serializes them and only the first finds it empty.
 */
export function createLabSchema(db: Database): void {
  db.transaction(() => {
    const empty = db.prepare('SELECT COUNT(*) AS n FROM sqlite_master').get() as { n: number };
    if (empty.n > 0) return;
    db.exec(ORDERS);
    ensureOutboxTables(db);
  }).immediate();
}
