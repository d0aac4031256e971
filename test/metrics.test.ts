import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { runCli, startCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';

// Issue 13: Prometheus metrics from every app, and `outbox status --watch`.
const h = useHarness();

const PRODUCER = 'dist/apps/producer/main.js';
const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';

/** GET /metrics on `port`: the exposition text, or undefined while nothing answers. */
async function scrape(port: number): Promise<string | undefined> {
  const response = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
  if (response === undefined) return undefined;
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return response.text();
}

/** The value of the one series of `name` (labels aside) in `text`; undefined when it is not there. */
function value(text: string | undefined, name: string): number | undefined {
  const line = text?.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** `value`, asserting the series is there. */
function must(text: string | undefined, name: string): number {
  const found = value(text, name);
  assert.notEqual(found, undefined, `no ${name} in\n${text}`);
  return found!;
}

const listening = (app: App, msg: string) => waitFor(() => app.output().includes(`"msg":"${msg}"`) || app.child.exitCode !== null, { message: `no "${msg}" line` });

/** A queue entry as the relay writes it, with its commit time. */
function message(aggregateId: number, seq: number, type: string, payload: object): string {
  return JSON.stringify({ event_id: `evt-${aggregateId}-${seq}`, aggregate_id: `order:${aggregateId}`, seq, event_type: type, payload, store_id: h.storeId, created_at: Date.now() });
}

describe('metrics', () => {
  it('/metrics of the producer, relay and consumer move while orders flow; drained, applied and duplicates agree with verify and report; a FLUSHALL counts as a state loss', async () => {
    // Three events a relay pushed and died before marking: the relay app pushes them again, three duplicates.
    await h.cli('place-order', '--count', '3');
    assert.equal((await runCli(['relay-crash'], h.env)).signal, 'SIGKILL');
    const producerPort = await freePort();
    const relayPort = await freePort();
    const consumerPort = await freePort();
    // Traffic until stopped: it runs until the counters were seen moving, however slow the start-up.
    const producer = startApp(h.env, PRODUCER, [], { PORT: String(producerPort), OUTBOX_RATE: '100' });
    const relay = startApp(h.env, RELAY, [], { OUTBOX_RELAY_HEALTH_PORT: String(relayPort) });
    const consumer = startApp(h.env, CONSUMER, [], { OUTBOX_CONSUMER_HEALTH_PORT: String(consumerPort), OUTBOX_HANDLER_THREADS: '1' });
    const scrapeAll = async () => ({ producer: await scrape(producerPort), relay: await scrape(relayPort), consumer: await scrape(consumerPort) });
    try {
      await Promise.all([listening(producer, 'producer listening'), listening(relay, 'health endpoint listening'), listening(consumer, 'health endpoint listening')]);
      assert.match(relay.output(), new RegExp(`"metrics":"http://127.0.0.1:${relayPort}/metrics"`));

      // While the traffic runs: two scrapes, the second with more pushed and more applied.
      const moving = (m: Awaited<ReturnType<typeof scrapeAll>>) => (value(m.relay, 'outbox_relay_events_pushed_total') ?? 0) > 0 && (value(m.consumer, 'outbox_events_applied_total') ?? 0) > 0;
      const first = (await waitFor(async () => ((m) => (moving(m) ? m : undefined))(await scrapeAll()), { message: 'the counters did not move' }))!;
      const later = (await waitFor(
        async () => {
          const m = await scrapeAll();
          const more = (name: string, app: 'relay' | 'consumer') => must(m[app], name) > must(first[app], name);
          return more('outbox_relay_events_pushed_total', 'relay') && more('outbox_events_applied_total', 'consumer') ? m : undefined;
        },
        { message: 'the counters stopped moving under traffic' },
      ))!;
      // Each app shows its own: the producer app.db's PENDING rows, not the relay's or the consumer's counters.
      assert.ok(must(later.producer, 'outbox_pending_events') >= 0);
      assert.ok(must(later.producer, 'outbox_oldest_pending_age_seconds') >= 0);
      assert.equal(value(later.producer, 'outbox_relay_events_pushed_total'), undefined);
      assert.equal(value(later.producer, 'outbox_events_applied_total'), undefined);
      assert.equal(value(later.consumer, 'outbox_pending_events'), undefined);
      assert.ok(must(later.relay, 'outbox_relay_batch_duration_seconds_count') >= 1);
      assert.ok(must(later.consumer, 'outbox_queue_length') >= 0);
      assert.match(later.consumer ?? '', /^outbox_in_flight_messages\{consumer="consumer-0",app="outbox-consumer"\} \d+$/m);
      assert.match(later.relay ?? '', /^process_cpu_seconds_total\{app="outbox-relay"\} /m);

      // Drained: the traffic over, nothing PENDING, queued or in flight, and applied no longer moving.
      await stopApp(producer);
      let applied = -1;
      const drained = (await waitFor(
        async () => {
          const m = { relay: await scrape(relayPort), consumer: await scrape(consumerPort) };
          const idle =
            must(m.relay, 'outbox_pending_events') === 0 &&
            must(m.relay, 'outbox_queue_length') === 0 &&
            must(m.consumer, 'outbox_in_flight_messages') === 0 &&
            must(m.consumer, 'outbox_events_applied_total') === applied;
          applied = must(m.consumer, 'outbox_events_applied_total');
          return idle ? m : undefined;
        },
        { timeoutMs: 15_000, message: 'the pipeline did not drain' },
      ))!;
      const [verify] = await Promise.all([h.cli('verify', '--settle', '0s'), h.cli('report')]);
      const processedUnique = Number(/^processed_unique = outbox rows +(\d+) +(\d+) +ok$/m.exec(verify.stdout)?.[2]);
      const enqueued = Number(/^enqueued=(\d+)$/m.exec(readFileSync(join(h.env.dir, 'report.txt'), 'utf8'))?.[1]);
      const duplicates = must(drained.consumer, 'outbox_duplicates_skipped_total');
      assert.equal(applied, processedUnique, 'applied = what verify finds applied');
      assert.equal(duplicates, 3, 'the three events relay-crash pushed, pushed again');
      assert.equal(applied + duplicates, enqueued, 'every message pushed was applied or skipped as a duplicate');
      assert.equal(must(drained.relay, 'outbox_relay_events_pushed_total'), enqueued - 3, 'the relay app pushed all but the crashed push');
      assert.equal(must(drained.consumer, 'outbox_commit_to_applied_seconds_count'), applied, 'one latency per applied event');
      for (const name of ['outbox_events_parked_total', 'outbox_events_dead_lettered_total', 'outbox_handler_failures_total', 'outbox_redis_state_losses_total']) {
        assert.equal(value(drained.consumer, name) ?? value(drained.relay, name), 0, name);
      }

      // Redis loses everything: the relay finds it and rebuilds, and counts it.
      await h.client.flushall();
      await waitFor(async () => value(await scrape(relayPort), 'outbox_redis_state_losses_total') === 1, { timeoutMs: 15_000, message: 'the state loss was not counted' });
      assert.match(relay.output(), /"msg":"Redis lost its state: rebuilding it from SQLite/);
    } finally {
      await Promise.all([stopApp(producer), stopApp(relay), stopApp(consumer)]);
    }
  });

  it('consumer: handler failures, retries, parked, dead-lettered and duplicates counted as they happen', async () => {
    const port = await freePort();
    // Order 1's first event fails its first two attempts, so its second event arrives ahead of it and is parked.
    const consumer = startApp(h.env, CONSUMER, [], { OUTBOX_CONSUMER_HEALTH_PORT: String(port), OUTBOX_HANDLER_THREADS: '1', OUTBOX_HANDLER_FAIL: 'throw-first:2@1:1' });
    try {
      await listening(consumer, 'health endpoint listening');
      await h.client.rpush(
        'outbox.events',
        message(1, 1, 'OrderPlaced', { orderId: 1, sku: 'SKU-X', qty: 1 }),
        message(1, 2, 'OrderQtyChanged', { orderId: 1, sku: 'SKU-X', qty: 2, previousQty: 1 }),
        'not an event',
      );
      const counted = await waitFor(
        async () => {
          const m = await scrape(port);
          return value(m, 'outbox_events_applied_total') === 2 && value(m, 'outbox_events_dead_lettered_total') === 1 ? m : undefined;
        },
        { message: 'the events were not applied and dead-lettered' },
      );
      assert.equal(must(counted, 'outbox_handler_failures_total'), 2);
      assert.equal(must(counted, 'outbox_handler_retries_total'), 2);
      assert.equal(must(counted, 'outbox_events_parked_total'), 1);
      assert.equal(must(counted, 'outbox_duplicates_skipped_total'), 0);
      assert.equal(must(counted, 'outbox_commit_to_applied_seconds_count'), 2);

      await h.client.rpush('outbox.events', message(1, 1, 'OrderPlaced', { orderId: 1, sku: 'SKU-X', qty: 1 }));
      await waitFor(async () => value(await scrape(port), 'outbox_duplicates_skipped_total') === 1, { message: 'the duplicate was not counted' });
    } finally {
      await stopApp(consumer);
    }
  });

  it('a bad endpoint port is refused before any connection: one line, exit 78', async () => {
    // Redis on a port where nothing listens: a refusal that came after connecting would never come.
    const env = { ...h.env, redisUrl: 'redis://127.0.0.1:1' };
    const consumer = startApp(env, CONSUMER, [], { OUTBOX_CONSUMER_HEALTH_PORT: '70000' });
    const relay = startApp(env, RELAY, [], { OUTBOX_RELAY_HEALTH_PORT: 'metrics' });
    const [consumerExit, relayExit] = await Promise.all([consumer.exited, relay.exited]);
    for (const [app, exit, setting, got] of [
      [consumer, consumerExit, 'OUTBOX_CONSUMER_HEALTH_PORT', '70000'],
      [relay, relayExit, 'OUTBOX_RELAY_HEALTH_PORT', 'metrics'],
    ] as const) {
      assert.equal(exit.code, 78, app.output());
      const lines = app.output().trim().split('\n');
      assert.equal(lines.length, 1, app.output());
      const line = JSON.parse(lines[0]);
      assert.equal(line.msg, `${setting} must be a port from 1 to 65535, or off, got "${got}"`);
      assert.equal(line.exitCode, 78);
    }
  });

  it('status --watch redraws every second and exits 0 on SIGTERM and on SIGINT', async () => {
    const title = /^outbox status at \S+, every 1 s \(Ctrl-C to stop\)$/gm;
    const watches = [startCli(['status', '--watch'], h.env), startCli(['status', '--watch'], h.env)];
    await Promise.all(watches.map((watch) => waitFor(() => (watch.stdout().match(title) ?? []).length >= 2 || watch.child.exitCode !== null, { message: 'fewer than two screens' })));
    watches[0].child.kill('SIGTERM');
    watches[1].child.kill('SIGINT');
    for (const watch of watches) {
      const result = await watch.done;
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stderr, '');
      assert.ok(result.stdout.match(title)!.length >= 2);
      const screens = result.stdout.split(title).slice(1);
      for (const screen of screens) assert.match(screen, /^outbox +pending 0, oldest pending -$/m);
    }
  });
});
