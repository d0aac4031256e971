import assert from 'node:assert/strict';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { watchDatabase } from '../shared/outbox/store/live-database.js';
import { StoreUnavailableError } from '../shared/outbox/errors/store-unavailable-error.js';
import { createDatabase } from '../shared/lab/init-stores.js';
import { createLogger } from '../shared/outbox/logger.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { createLiveOrderService } from '../shared/lab/producer/live-order-service.js';
import { count, tempDir } from './helpers/stores.js';

function watching(dir: string, pollMs: number) {
  const lines: string[] = [];
  const log = createLogger('test', (line) => lines.push(line));
  const watch = watchDatabase(dir, { log, app: 'producer', stopped: 'refusing writes', pollMs });
  return { watch, service: createLiveOrderService(watch), logged: () => lines.map((line) => JSON.parse(line).msg as string) };
}

const removeDatabase = (dir: string) => {
  for (const suffix of ['', '-wal', '-shm']) rmSync(join(dir, `app.db${suffix}`), { force: true });
};

const unavailable = (pattern: RegExp) => (error: unknown) => error instanceof StoreUnavailableError && pattern.test(error.message);

describe('live database (real SQLite files)', () => {
  it('a write committed into a replaced app.db is refused, and lands nowhere anyone reads', () => {
    const dir = tempDir();
    createDatabase(dir);
    // No periodic check: only the write itself can notice the replacement.
    const { watch, service } = watching(dir, 3_600_000);
    assert.equal(service.placeOrder({ sku: 'SKU-A', qty: 1 }).order.id, 1);
    removeDatabase(dir);
    createDatabase(dir);
    assert.throws(() => service.placeOrder({ sku: 'SKU-A', qty: 2 }), unavailable(/deleted or replaced under the producer: refusing writes.*went to the old file/));
    assert.equal(count(dir, 'SELECT COUNT(*) FROM orders'), 0);
    assert.throws(() => service.changeQty(1, 3), unavailable(/deleted or replaced/), 'later writes are refused before they start');
    assert.throws(() => service.getOrder(1), unavailable(/deleted or replaced/));
    assert.equal(count(dir, 'SELECT COUNT(*) FROM outbox'), 0);
    watch.close();
  });

  it('after a deletion it logs once, waits without creating app.db, and resumes on the next valid file', async () => {
    const dir = tempDir();
    createDatabase(dir);
    const w = watching(dir, 20);
    const watch = w.watch;
    w.service.placeOrder({ sku: 'SKU-A', qty: 1 });
    removeDatabase(dir);
    assert.throws(() => w.service.placeOrder({ sku: 'SKU-B', qty: 1 }), unavailable(/went to the old file/));
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(existsSync(join(dir, 'app.db')), false, 'the watch never creates app.db');
    assert.equal(w.logged().filter((msg) => /deleted or replaced/.test(msg)).length, 1);
    createDatabase(dir);
    await waitFor(() => watch.check());
    const { order } = w.service.placeOrder({ sku: 'SKU-C', qty: 4 });
    assert.equal(order.id, 1, 'the write went to the new file');
    assert.equal(count(dir, "SELECT COUNT(*) FROM orders WHERE sku = 'SKU-C'"), 1);
    assert.ok(w.logged().some((msg) => /a valid app.db is back: the producer resumes on it/.test(msg)));
    watch.close();
  });

  it('with no app.db, or a file that is not one, it says why once each and opens the database once init made it', async () => {
    const dir = tempDir();
    const w = watching(dir, 20);
    const watch = w.watch;
    assert.throws(() => w.service.placeOrder({ sku: 'SKU-A', qty: 1 }), unavailable(/^no database at .*app\.db: run "outbox init" first/));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(existsSync(join(dir, 'app.db')), false);
    assert.equal(w.logged().length, 1, w.logged().join('\n'));
    writeFileSync(join(dir, 'app.db'), 'not a database, just text that is long enough to be read');
    await waitFor(() => w.logged().length === 2);
    assert.throws(() => w.service.placeOrder({ sku: 'SKU-A', qty: 1 }), unavailable(/cannot open .*app\.db/));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(w.logged().length, 2, 'the same reason is not logged again');
    createDatabase(dir);
    await waitFor(() => watch.check());
    assert.equal(w.service.placeOrder({ sku: 'SKU-A', qty: 1 }).order.id, 1);
    watch.close();
  });

  it('a handle held by a pass is closed only when the pass releases it', async () => {
    const dir = tempDir();
    createDatabase(dir);
    const w = watching(dir, 20);
    const watch = w.watch;
    const old = watch.current();
    const release = old.hold();
    removeDatabase(dir);
    createDatabase(dir);
    await waitFor(() => watch.check() && watch.current() !== old);
    assert.equal(old.db.open, true, 'still held');
    release();
    assert.equal(old.db.open, false);
    watch.close();
  });
});
