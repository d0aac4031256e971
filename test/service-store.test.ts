import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { closeRedis, connectRedis, createConsumer, createOutbox, createRelay, defineEvents, defineRedisHandlers, effect } from '../shared/outbox/index.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { tempDir } from './helpers/stores.js';

// The operations CLI on a store that is not the lab's: a service's own database (the library's
// tables, no `orders`), named by --db / OUTBOX_DB; and `status` when Redis cannot be read.
const h = useHarness();
const PRODUCER = 'dist/apps/producer/main.js';

const events = defineEvents({
  NoteAdded: { aggregate: 'note', payload: z.object({ text: z.string() }) },
  NoteArchived: { aggregate: 'note', payload: z.object({}) },
});
const handlers = defineRedisHandlers(events, {
  NoteAdded: (e) => [effect.sadd('notes:live', e.aggregateId)],
  NoteArchived: (e) => [effect.srem('notes:live', e.aggregateId), effect.hincrby('notes:stats', 'archived', 1)],
});

/** A service's database with three events, relayed and consumed in namespace `notes` beside the lab's store. */
async function serviceStore(): Promise<string> {
  const path = join(tempDir(), 'notes.db');
  const db = new Database(path);
  const outbox = createOutbox(db, { events });
  outbox.append({ aggregateType: 'note', aggregateId: 1, type: 'NoteAdded', payload: { text: 'a' } });
  outbox.append({ aggregateType: 'note', aggregateId: 2, type: 'NoteAdded', payload: { text: 'b' } });
  outbox.append({ aggregateType: 'note', aggregateId: 1, type: 'NoteArchived', payload: {} });
  const redis = await connectRedis(h.env.redisUrl, { namespace: 'notes' });
  try {
    await createRelay(db, redis).relayAll();
    const consumer = await createConsumer({ redis, handlers });
    await consumer.drain();
    await consumer.close();
  } finally {
    await closeRedis(redis);
    db.close();
  }
  return path;
}

async function oneLine(args: string[], env: Record<string, string> = {}) {
  return runCli(args, { ...h.env, env });
}

describe("the operations CLI on a service's own database (--db / OUTBOX_DB)", () => {
  it('status, verify, report, replay, prune, dead-letter and parked run on it without the lab\'s orders; the lab commands refuse it without advising init --force', async () => {
    const db = await serviceStore();
    const ns = ['--namespace', 'notes'];
    const status = await oneLine(['status', '--db', db, ...ns]);
    assert.equal(status.code, 0, status.stdout + status.stderr);
    assert.match(status.stdout, /^store +\w+ in namespace notes: Redis serves it/m);
    assert.match(status.stdout, /^outbox +pending 0, oldest pending -$/m);
    assert.match(status.stdout, /^consumer +processed 3,/m);

    const verify = await oneLine(['verify', '--db', db, ...ns]);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    assert.match(verify.stdout, /VERIFY OK/);

    const report = await oneLine(['report', '--db', db, ...ns]);
    assert.equal(report.code, 0, report.stderr);
    assert.match(report.stdout, /^outbox=3\nenqueued=3\nprocessed_unique=3\n/);

    for (const args of [
      ['replay', '--from', '1', '--dry-run'],
      ['prune', '--older-than', '0s', '--dry-run'],
      ['dead-letter', 'list'],
      ['parked', 'list'],
    ]) {
      const result = await oneLine([...args, '--db', db, ...ns]);
      assert.equal(result.code, 0, `${args.join(' ')}: ${result.stdout}${result.stderr}`);
    }
    // The variable names it too; the lab's app.db of the data dir is not what status reads then.
    const fromEnv = await oneLine(['status', '--json', ...ns], { OUTBOX_DB: db });
    assert.equal(fromEnv.code, 0, fromEnv.stderr);
    assert.equal((JSON.parse(fromEnv.stdout) as { processed: number }).processed, 3);

    // The lab's order commands need the lab's orders: refused in one line, and never "init --force".
    const order = await oneLine(['place-order', '--db', db]);
    assert.equal(order.code, 5, order.stderr);
    assert.match(order.stderr, /^outbox: .*notes\.db has the outbox's tables but not the lab's orders .*run "outbox init" with a data dir of its own/);
    assert.doesNotMatch(order.stderr, /--force/);
    const init = await oneLine(['init', '--db', db]);
    assert.equal(init.code, 2, init.stderr);
    const missing = await oneLine(['status', '--db', join(tempDir(), 'none.db')]);
    assert.equal(missing.code, 5);
    assert.match(missing.stderr, /^outbox: no database at .*none\.db \(--db \/ OUTBOX_DB\): pass the path of your service's database\n$/);
  });

  it('status and report on the lab\'s app.db of a service (no orders table) in the data dir work too', async () => {
    const db = await serviceStore();
    const dir = tempDir();
    const { copyFileSync } = await import('node:fs');
    copyFileSync(db, join(dir, 'app.db'));
    for (const args of [['status'], ['report']]) {
      const result = await runCli([...args, '--namespace', 'notes'], { ...h.env, dir });
      assert.equal(result.code, 0, `${args[0]}: ${result.stdout}${result.stderr}`);
      assert.doesNotMatch(result.stderr, /orders|--force/);
    }
  });
});

describe('status without Redis', () => {
  it('still shows the pending rows, the oldest one\'s age, each app\'s health and the Redis error in one line; exit 5', async () => {
    await h.cli('place-order', '--count', '2');
    const port = await freePort();
    const producer = startApp(h.env, PRODUCER, [], { PORT: String(port) });
    try {
      await waitFor(() => /producer listening/.test(producer.output()) || producer.child.exitCode !== null, { timeoutMs: 15_000, message: 'the producer did not listen' });
      const down = `redis://127.0.0.1:${await freePort()}`;
      const status = await runCli(['status'], { ...h.env, redisUrl: down, env: { PORT: String(port), OUTBOX_RELAY_HEALTH_PORT: 'off', OUTBOX_CONSUMER_HEALTH_PORT: 'off' } });
      assert.equal(status.code, 5, status.stdout + status.stderr);
      const lines = status.stdout.trimEnd().split('\n');
      assert.match(lines[0], new RegExp(`^store +${h.storeId}: WARN Redis cannot be read`));
      assert.match(lines[1], /^outbox +pending 2, oldest pending \d/);
      assert.match(status.stdout, new RegExp(`^apps +outbox-producer 127\\.0\\.0\\.1:${port}/healthz: ok \\(pid ${producer.child.pid}\\)$`, 'm'));
      assert.match(status.stdout, /^redis +ERROR cannot connect to Redis at redis:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/m);
      assert.equal(status.stdout.split('\n').filter((l) => l.startsWith('redis')).length, 1);
      // As every expected error: one line on stderr too.
      assert.match(status.stderr, /^outbox: cannot connect to Redis at .*\(ECONNREFUSED\)[^\n]*\n$/);
      const json = await runCli(['status', '--json'], { ...h.env, redisUrl: down, env: { PORT: String(port) } });
      assert.equal(json.code, 5);
      const parsed = JSON.parse(json.stdout) as { degraded: boolean; pending: number; redisError: string };
      assert.deepEqual([parsed.degraded, parsed.pending], [true, 2]);
      assert.match(parsed.redisError, /ECONNREFUSED/);
    } finally {
      await stopApp(producer);
    }
  });

  it("clears a REFUSED record of an app that runs: a second producer's EADDRINUSE while the first one serves", async () => {
    const port = await freePort();
    const first = startApp(h.env, PRODUCER, [], { PORT: String(port) });
    try {
      await waitFor(() => /producer listening/.test(first.output()) || first.child.exitCode !== null, { timeoutMs: 15_000, message: 'the producer did not listen' });
      const second = startApp(h.env, PRODUCER, [], { PORT: String(port) });
      assert.equal((await second.exited).code, 78, second.output());
      const refusal = join(h.env.dir, 'refused', 'outbox-producer.json');
      assert.equal(existsSync(refusal), true);
      const status = await runCli(['status'], { ...h.env, env: { PORT: String(port), OUTBOX_RELAY_HEALTH_PORT: 'off', OUTBOX_CONSUMER_HEALTH_PORT: 'off' } });
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /outbox-producer .*: ok \(pid/);
      assert.doesNotMatch(status.stdout, /REFUSED/);
      assert.equal(existsSync(refusal), false, 'the stale record stayed');
    } finally {
      await stopApp(first);
    }
  });
});
