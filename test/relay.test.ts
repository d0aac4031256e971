import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { createRelay } from '../shared/outbox/relay/relay.js';
import { closeRedis, connectRedis } from '../shared/outbox/redis/connect.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { sleep } from '../shared/outbox/sleep.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { count, readDb } from './helpers/stores.js';

const h = useHarness();
const o = orders(() => h.env);

const queue = () => h.client.lrange('outbox.events', 0, -1);

describe('outbox relay', () => {
  it('pushes every PENDING row in id order, marks it PUBLISHED, and a second run adds nothing', async () => {
    o.place(3);
    o.changeQty(2, 4);
    const first = await h.cli('relay');
    assert.match(first.stdout, /relayed 4 events in 1 batch \(/);
    const messages = (await queue()).map((raw) => JSON.parse(raw));
    assert.deepEqual(
      messages.map((m) => [m.aggregate_id, m.seq, m.event_type]),
      [['order:1', 1, 'OrderPlaced'], ['order:2', 1, 'OrderPlaced'], ['order:3', 1, 'OrderPlaced'], ['order:2', 2, 'OrderQtyChanged']],
    );
    assert.deepEqual(messages[3].payload, { orderId: 2, sku: 'SKU-1', qty: 4, previousQty: 1 });
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED' AND published_at IS NOT NULL"), 4);
    assert.equal(await h.client.get('outbox:enqueued'), '4');

    await h.cli('relay');
    assert.equal(await h.client.llen('outbox.events'), 4);
    assert.equal(await h.client.get('outbox:enqueued'), '4');
  });

  it('works in batches of --batch-size', async () => {
    o.place(7);
    assert.match((await h.cli('relay', '--batch-size', '3')).stdout, /relayed 7 events in 3 batches \(/);
    assert.equal(await h.client.llen('outbox.events'), 7);
  });

  it('reads PENDING rows through the partial index, in id order, without a sort', () => {
    const db = readDb(h.env.dir);
    try {
      const plan = db
        .prepare("EXPLAIN QUERY PLAN SELECT id FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT 1000")
        .all()
        .map((row) => (row as { detail: string }).detail)
        .join('\n');
      assert.match(plan, /USING (COVERING )?INDEX outbox_pending/);
      assert.doesNotMatch(plan, /TEMP B-TREE/);
    } finally {
      db.close();
    }
  });

  it('never marks a row PUBLISHED while Redis is down, and catches up when it returns', async () => {
    o.place(2);
    await h.redis.stop();
    try {
      const result = await runCli(['relay'], h.env);
      assert.equal(result.code, 5);
      assert.match(result.stderr, /^outbox: cannot connect to Redis at redis:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 2);
    } finally {
      await h.redis.resume();
    }
    await h.cli('relay');
    assert.equal(await h.client.llen('outbox.events'), 2);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
  });

  it('refuses a Redis older than 6.2 with a one-line message', async () => {
    // No Redis < 6.2 can be installed here, so a tiny RESP server that answers as Redis 6.0.16 does
    // stands in for it. Everything else in the suite talks to a real redis-server.
    const { createServer } = await import('node:net');
    const server = createServer((socket) => {
      socket.on('data', (data) => {
        // One reply per command: ioredis pipelines its handshake into one chunk.
        for (const [, name] of data.toString().matchAll(/^\*\d+\r\n\$\d+\r\n(\w+)/gm)) {
          if (/^info$/i.test(name)) {
            const body = '# Server\r\nredis_version:6.0.16\r\n';
            socket.write(`$${body.length}\r\n${body}\r\n`);
          } else if (/^hello$/i.test(name)) {
            socket.write('-ERR unknown command `HELLO`\r\n');
          } else {
            socket.write('+OK\r\n');
          }
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      o.place(1);
      const result = await runCli(['relay', '--redis', `redis://127.0.0.1:${port}`], h.env);
      assert.equal(result.code, 5);
      assert.equal(result.stderr.trim(), `outbox: Redis at redis://127.0.0.1:${port} is version 6.0.16; outbox needs 6.2.0 or newer (for LMOVE)`);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 1);
    } finally {
      server.close();
    }
  });
});

describe('outbox order-check', () => {
  it('writes ORDER OK when each aggregate\'s events are queued in ascending seq, even in the same millisecond', async () => {
    o.place(3);
    // All of these commit within a few ms; created_at cannot tell them apart, seq and id can.
    for (const qty of ['2', '3', '4']) await h.cli('change-qty', '--id', '1', '--qty', qty);
    o.cancel(3);
    await h.cli('relay');
    const result = await h.cli('order-check');
    assert.equal(readFileSync(join(h.env.dir, 'order_check.out'), 'utf8'), 'ORDER OK\n');
    assert.match(result.stdout, /^ORDER OK$/m);
  });

  it('allows a re-delivered duplicate later in the queue', async () => {
    o.place(1);
    o.changeQty(1, 2);
    await h.cli('relay');
    const [first] = await queue();
    await h.client.rpush('outbox.events', first);
    await h.cli('order-check');
    assert.equal(readFileSync(join(h.env.dir, 'order_check.out'), 'utf8'), 'ORDER OK\n');
  });

  it('reports ORDER VIOLATION and exits non-zero when an aggregate\'s seq goes backwards', async () => {
    o.place(1);
    o.changeQty(1, 2);
    await h.cli('relay');
    const [placed, changed] = await queue();
    await h.client.del('outbox.events');
    await h.client.rpush('outbox.events', changed, placed);
    const result = await runCli(['order-check'], h.env);
    assert.equal(result.code, 1);
    const { event_id } = JSON.parse(placed);
    assert.equal(
      readFileSync(join(h.env.dir, 'order_check.out'), 'utf8'),
      `ORDER VIOLATION aggregate=order:1 seq=1 after_seq=2 event_id=${event_id} index=1\n`,
    );
  });
});

describe('at-least-once: relay-crash then relay', () => {
  it('relay-crash really dies after the push, before marking; the next relay pushes the same events again', async () => {
    o.place(2);
    const crash = await runCli(['relay-crash'], h.env);
    assert.equal(crash.signal, 'SIGKILL');
    assert.match(crash.stderr, /crash point relay\.after-push: pushed rows 1-2, dying before marking them PUBLISHED/);
    assert.equal(await h.client.llen('outbox.events'), 2);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 2);

    await h.cli('relay');
    assert.equal(await h.client.llen('outbox.events'), 4);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);

    const result = await h.cli('dup-check');
    const db = readDb(h.env.dir);
    const ids = db.prepare('SELECT event_id FROM outbox ORDER BY id').pluck().all() as string[];
    db.close();
    const expected = ids.map((id) => `DUPLICATE event_id=${id} count=2\n`).join('');
    assert.equal(readFileSync(join(h.env.dir, 'atleastonce.out'), 'utf8'), expected);
    assert.match(result.stdout, /DUPLICATE event_id=.* count=2/);
    await h.cli('order-check');
  });

  it('dup-check writes NO DUPLICATE and exits non-zero when every event is queued once', async () => {
    o.place(1);
    await h.cli('relay');
    const result = await runCli(['dup-check'], h.env);
    assert.equal(result.code, 1);
    assert.equal(readFileSync(join(h.env.dir, 'atleastonce.out'), 'utf8'), 'NO DUPLICATE\n');
  });

  it('a relay killed mid-batch, inside the UPDATE, leaves every row PENDING: the next relay pushes them again', async () => {
    o.place(6);
    const crash = await runCli(['relay'], { ...h.env, env: { OUTBOX_CRASH_POINTS: 'relay.mid-batch' } });
    assert.equal(crash.signal, 'SIGKILL');
    assert.match(crash.stderr, /crash point relay\.mid-batch: dying with rows 1-3 marked, uncommitted/);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 6);
    await h.cli('relay');
    assert.equal(await h.client.llen('outbox.events'), 12);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
  });

  it('a relay with a backlog (full batches, each marked on the mark thread while the next is pushed) killed mid-batch leaves that batch and the rest PENDING: the next relay pushes and marks them all', async () => {
    // Batches of 2 over 7 rows: full batches are marked on the mark thread, the crash point fires there
    // (the first mark), so rows 1-2 stay PENDING with the rest; the next relay pushes all again.
    o.place(7);
    const crash = await runCli(['relay', '--batch-size', '2'], { ...h.env, env: { OUTBOX_CRASH_POINTS: 'relay.mid-batch' } });
    assert.equal(crash.signal, 'SIGKILL');
    assert.match(crash.stderr, /crash point relay\.mid-batch: dying with rows 1-1 marked, uncommitted/);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 7);
    // Pushed before the kill: the first batch, and maybe the next two (read and pushed ahead while the first was pushed and marked).
    const pushed = await h.client.llen('outbox.events');
    assert.ok([2, 4, 6].includes(pushed), `${pushed}`);
    const relayed = await runCli(['relay', '--batch-size', '2'], h.env);
    assert.equal(relayed.code, 0, relayed.stderr);
    assert.match(relayed.stdout, /relayed 7 events in 4 batches/);
    assert.equal(await h.client.llen('outbox.events'), pushed + 7);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
  });

  it('a mark that app.db refuses on the mark thread (locked past the busy timeout) fails as SQLITE_BUSY, and the next pass marks what was pushed without pushing it again', async () => {
    o.place(6);
    const redis = await connectRedis(h.env.redisUrl);
    const db = openDatabase(h.env.dir);
    const locker = openDatabase(h.env.dir);
    try {
      db.pragma('busy_timeout = 50');
      const relay = createRelay(db, redis, { batchSize: 2 });
      // Paired first, then the write lock taken: the pass reads and pushes, and its marks wait 50 ms and fail.
      await relay.pair();
      locker.prepare('BEGIN IMMEDIATE').run();
      await assert.rejects(relay.relayAll(), (error: Error & { code?: string }) => error instanceof Database.SqliteError && error.code === 'SQLITE_BUSY');
      const pushed = await h.client.llen('outbox.events');
      assert.ok([2, 4, 6].includes(pushed), `${pushed}`);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 6);
      locker.prepare('COMMIT').run();
      assert.deepEqual(await relay.relayAll(), { batches: 3, events: 6 });
      // Every row pushed once: the batches acknowledged before the failure were marked, not pushed again.
      assert.equal(await h.client.llen('outbox.events'), 6);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
      relay.close();
    } finally {
      if (locker.inTransaction) locker.prepare('ROLLBACK').run();
      locker.close();
      db.close();
      await closeRedis(redis);
    }
  });

  it('a mark in the relay\'s thread that waits for the write lock leaves the event loop free (timers run, the lock holder commits), and marks once the lock is free, within the busy timeout', async () => {
    o.place(3);
    const redis = await connectRedis(h.env.redisUrl);
    const db = openDatabase(h.env.dir);
    const locker = openDatabase(h.env.dir);
    let ticker: NodeJS.Timeout | undefined;
    try {
      db.pragma('busy_timeout = 2000');
      // A batch larger than the backlog: marked in this thread, not on the mark thread.
      const relay = createRelay(db, redis, { batchSize: 10 });
      await relay.pair();
      // The lock is released by a timer of this process: a mark that blocked the event loop would
      // hold it back until its own busy timeout ran out (SQLITE_BUSY).
      locker.prepare('BEGIN IMMEDIATE').run();
      const lockedAt = Date.now();
      setTimeout(() => locker.prepare('COMMIT').run(), 300);
      let last = Date.now();
      let longestGap = 0;
      ticker = setInterval(() => {
        longestGap = Math.max(longestGap, Date.now() - last);
        last = Date.now();
      }, 10);
      assert.deepEqual(await relay.relayAll(), { batches: 1, events: 3 });
      assert.ok(Date.now() - lockedAt >= 290, 'the mark waited for the lock');
      assert.ok(longestGap < 150, `the event loop was held ${longestGap} ms`);
      assert.equal(await h.client.llen('outbox.events'), 3);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 0);
      relay.close();
    } finally {
      clearInterval(ticker);
      if (locker.inTransaction) locker.prepare('ROLLBACK').run();
      locker.close();
      db.close();
      await closeRedis(redis);
    }
  });

  it('relay-crash with nothing PENDING does not crash', async () => {
    const result = await runCli(['relay-crash'], h.env);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /nothing was PENDING: no crash/);
  });
});

describe('relay and producer side by side', () => {
  it('rows committed while a relay runs are all delivered, in per-aggregate order', async () => {
    // Aggregates get several events (seq 1-3) while relays with small batches run, so that an
    // overlap or a reordering would show in order-check.
    o.place(60);
    const relays: Promise<unknown>[] = [];
    for (let i = 0; i < 5; i += 1) relays.push(runCli(['relay', '--batch-size', '20'], h.env));
    const writers = [
      ...[1, 2].map(() => runCli(['place-order', '--count', '200'], h.env)),
      (async () => {
        // In this process, spread over the relays' run.
        const db = openDatabase(h.env.dir);
        try {
          const orders = createOrderService(db);
          for (let id = 1; id <= 60; id += 1) {
            orders.changeQty(id, 9);
            if (id % 2 === 0) orders.cancelOrder(id);
            await sleep(2);
          }
        } finally {
          db.close();
        }
        return [];
      })(),
    ];
    for (const r of (await Promise.all(writers)).flat() as { code: number; stderr: string }[]) assert.equal(r.code, 0, r.stderr);
    for (const r of (await Promise.all(relays)) as { code: number; stderr: string }[]) assert.equal(r.code, 0, r.stderr);
    await h.cli('relay');
    const unique = new Set((await queue()).map((raw) => JSON.parse(raw).event_id));
    assert.equal(unique.size, 60 + 400 + 60 + 30);
    await h.cli('order-check');
  });
});
