import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { DEFAULT_RELAY_BATCH_SIZE } from '../shared/outbox/relay/relay.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/stores.js';

// outbox chaos brings its own redis-server and pm2 home; these settings only point elsewhere.
const env = { dir: '/nonexistent', redisUrl: 'redis://127.0.0.1:1' };

/** Runs `outbox chaos <args> --json <file>`, asserts it ended with CHAOS OK, and resolves its output and figures. */
async function runChaos(args: string[]) {
  const json = join(tempDir(), 'chaos.json');
  const result = await runCli(['chaos', ...args, '--json', json], env);
  assert.equal(result.code, 0, result.stdout + result.stderr);
  assert.match(result.stdout, /CHAOS OK: nothing lost, nothing applied twice, nothing applied out of order/);
  return { ...result, figures: JSON.parse(readFileSync(json, 'utf8')) };
}

describe('outbox chaos', () => {
  it('a short run with the default faults (apps killed or crashed, Redis down), records expiring and guards dropped, ends with every invariant holding', async () => {
    // A 3 s dedupe window and a 20 s aggregate horizon: records are swept and idle guards dropped during
    // the faults. The horizon must outlast any event's commit-to-apply time (docs/dedupe-window.md):
    // relay crashes and Redis down leave events pending up to ~15 s here, so 10 s skipped some.
    const window = ['--dedupe-window', '3s', '--aggregate-horizon', '20s'];
    const { stderr, figures } = await runChaos(['--duration', '25s', '--rate', '300', '--kill-every', '1500ms', '--seed', '7', ...window]);
    assert.match(stderr, /^chaos \d+s\/25s +faults \d+/m);
    const injected = Object.values(figures.faults as Record<string, number>).reduce((a, b) => a + b, 0);
    assert.ok(injected >= 3, `only ${injected} faults took effect: ${JSON.stringify(figures.faults)}`);
    assert.ok(figures.outboxRows > 1000, `only ${figures.outboxRows} events`);
    assert.ok(figures.swept > 0 && figures.droppedGuards > 0, `swept ${figures.swept}, dropped ${figures.droppedGuards}`);
    assert.equal(figures.processedUnique, figures.outboxRows);
    assert.ok(figures.enqueued >= figures.outboxRows);
    for (const key of ['lost', 'appliedTwice', 'outOfOrder', 'inventoryMismatches', 'parked']) assert.equal(figures[key], 0, key);
    assert.equal(figures.ok, true);
  });

  it('a short run that wipes Redis and prunes ends with nothing lost, doubled or reordered, and nothing unrecoverable', async () => {
    const { stdout, figures } = await runChaos(['--duration', '20s', '--rate', '300', '--kill-every', '1s', '--seed', '2', '--targets', 'relay,consumer,redis-wipe,prune']);
    assert.match(stdout, /^Redis was wiped \d+ time\(s\): enqueued, duplicates absorbed and applied twice are summed/m);
    assert.ok(figures.faults['redis wiped'] >= 1, `no wipe took effect: ${JSON.stringify(figures.faults)}`);
    assert.ok(figures.faults.prune >= 1, `no prune ran: ${JSON.stringify(figures.faults)}`);
    assert.ok(figures.pruned > 0, 'prune deleted nothing');
    // Every event, pruned or not, was applied once in the last Redis: rebuilt from SQLite after each wipe.
    assert.equal(figures.processedUnique, figures.outboxRows + figures.pruned);
    assert.ok(figures.enqueued >= figures.outboxRows + figures.pruned);
    for (const key of ['lost', 'unrecoverable', 'appliedTwice', 'outOfOrder', 'inventoryMismatches', 'parked']) assert.equal(figures[key], 0, key);
    assert.equal(figures.ok, true);
  });

  it('a short run that pauses a relay, holds app.db\'s write lock and fails handlers ends with every invariant holding and at most a batch of duplicates per incident', async () => {
    // Seed 30: a relay paused, app.db locked and handlers failing twice each, all within the first 15 s.
    const { stdout, figures } = await runChaos(['--duration', '20s', '--rate', '300', '--kill-every', '1500ms', '--seed', '30', '--targets', 'pause,sqlite-lock,handler-fail']);
    assert.match(stdout, /^duplicates per incident \(enqueued - rows newly PUBLISHED/m);
    for (const kind of ['pause relay', 'sqlite lock', 'handler fail']) assert.ok(figures.faults[kind] >= 1, `no ${kind}: ${JSON.stringify(figures.faults)}`);
    for (const kind of ['pause relay', 'sqlite lock']) {
      const measured = figures.duplicatesPerIncident[kind];
      assert.equal(measured.incidents, figures.faults[kind], `every ${kind} is measured`);
      assert.ok(measured.max <= DEFAULT_RELAY_BATCH_SIZE, `${kind} caused ${measured.max} duplicates, more than one relay batch`);
    }
    assert.equal(figures.processedUnique, figures.outboxRows);
    // The handler failures were transient: every event's last attempt came after them.
    for (const key of ['lost', 'appliedTwice', 'outOfOrder', 'inventoryMismatches', 'parked', 'deadLettered']) assert.equal(figures[key], 0, key);
    assert.equal(figures.ok, true);
  });

  it('a short run that corrupts Redis state for seconds at a time ends with every refused event applied once (issue 30)', async () => {
    // The lab's effect hash a string for 3 s, again and again: the consumer refuses, then retries.
    const { figures } = await runChaos(['--duration', '10s', '--rate', '300', '--kill-every', '2s', '--seed', '3', '--targets', 'consumer,corrupt-state']);
    assert.ok(figures.faults['corrupt state'] >= 1, `no corrupt state: ${JSON.stringify(figures.faults)}`);
    assert.equal(figures.processedUnique, figures.outboxRows);
    for (const key of ['lost', 'appliedTwice', 'outOfOrder', 'inventoryMismatches', 'parked', 'deadLettered']) assert.equal(figures[key], 0, key);
    assert.equal(figures.ok, true);
  });

  for (const [args, message] of [
    [['--targets', 'relay,database'], /--targets takes a comma-separated list of relay, consumer, producer, redis, redis-wipe, prune, pause, sqlite-lock, handler-fail, corrupt-state/],
    [['--duration', 'forever'], /--duration must be a duration like 60s/],
    [['--kill-every', '10ms'], /--kill-every must be at least 100ms/],
    // consumer-db-loss is the database-mode run (the payments example; test/payments-chaos.test.ts runs it).
    [['--targets', 'consumer-db-loss,redis-wipe'], /--targets in database mode takes a comma-separated list of processes, consumer-db-loss, got "consumer-db-loss,redis-wipe"/],
  ] as const) {
    it(`rejects ${args.join(' ')} before starting anything`, async () => {
      const result = await runCli(['chaos', ...args], env);
      assert.equal(result.code, 2);
      assert.match(result.stderr, message);
    });
  }
});
