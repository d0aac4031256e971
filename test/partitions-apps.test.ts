import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { partitionOf } from '../shared/outbox/redis/partitions.js';
import { openDatabase } from '../shared/outbox/store/open-database.js';
import { ledgerHolds, partitionLedger } from '../shared/tooling/chaos/partition-ledger.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, stopApps } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { usePartitions } from './helpers/partitions.js';
import { guardsOf } from './helpers/guards.js';

// Partitions on one Redis with the embedded store: the relay app (its BullMQ job) pushes each event
// to its aggregate's partition, and two consumer apps share the three partitions by lease.
const h = useHarness({ init: false });
const PARTITIONS = 3;

const partitions = usePartitions(h, PARTITIONS);

describe('partitions on one Redis with app.db', () => {
  it('the relay app and two consumer apps on 3 partitions: every event applied once, in seq order per aggregate, each partition in its own keys', async () => {
    const env = { OUTBOX_PARTITIONS: String(PARTITIONS), OUTBOX_PARTITION_LEASE: '1s', OUTBOX_HANDLER_THREADS: '1', OUTBOX_RELAY_EVERY: '200ms' };
    const relay = startApp(h.env, 'dist/apps/relay/main.js', [], env);
    const consumers = ['one', 'two'].map((id) => startApp(h.env, 'dist/apps/consumer/main.js', [], { ...env, OUTBOX_CONSUMER_ID: id }));
    const db = openDatabase(h.env.dir);
    try {
      for (const app of [relay, ...consumers]) await waitFor(() => /"msg":"(relay|consumer) started"/.test(app.output()), { timeoutMs: 20_000, message: app.output() });
      const holders = async () => Promise.all(partitions().clients.map(async (redis) => (await redis.get(keys.partitionLease))?.split('#')[0]));
      // Both consumers hold a share before any event is written: the events then go to both.
      await waitFor(async () => new Set(await holders()).size === 2 && !(await holders()).includes(undefined), { timeoutMs: 15_000, message: 'the partitions were not shared' });
      const service = createOrderService(db);
      const ids = Array.from({ length: 12 }, (_, i) => service.placeOrder({ sku: `SKU-${i % 3}`, qty: 1 }).order.id);
      for (let round = 0; round < 15; round += 1) for (const id of ids) service.changeQty(id, 2 + round);
      const rows = db.prepare('SELECT event_id, aggregate_id, seq FROM outbox').all() as { event_id: string; aggregate_id: string; seq: number }[];
      assert.equal(new Set(rows.map((row) => partitionOf(row.aggregate_id, PARTITIONS))).size, PARTITIONS, 'the orders spread over every partition');
      await waitFor(async () => ledgerHolds(await partitionLedger(rows, partitions())), { timeoutMs: 30_000 }).catch(() => {});
      const { events, aggregates, ...faults } = await partitionLedger(rows, partitions());
      assert.deepEqual(faults, { lost: [], appliedTwice: [], outOfOrder: [], extra: 0, deadLettered: 0, parked: 0, queued: 0 });
      assert.equal(events, 12 * 16);
      assert.equal(aggregates, 12);
      // Each partition holds its own aggregates' state, under its own hash tag; the seed's names stay empty.
      for (let p = 0; p < PARTITIONS; p += 1) {
        const applied = Object.keys(await guardsOf(partitions().clients[p]));
        assert.ok(applied.length > 0 && applied.every((aggregate) => partitionOf(aggregate, PARTITIONS) === p), `partition ${p}: ${applied.join(', ')}`);
        assert.equal(await h.client.exists(`{p${p}}:${keys.processed}`), 1);
      }
      assert.equal(await h.client.exists(keys.processed, keys.events, keys.meta), 0);
      assert.deepEqual(new Set(await holders()), new Set(['one', 'two']), `leases: ${(await holders()).join(', ')}`);
      for (const consumer of consumers) assert.match(consumer.output(), /"msg":"partition taken"/);
    } finally {
      db.close();
      await stopApps([relay, ...consumers]);
    }
  });

  it('a relay or a consumer configured for another number of partitions than Redis holds is refused at start in one line, exit 78', async () => {
    const env = { OUTBOX_PARTITIONS: String(PARTITIONS), OUTBOX_RELAY_EVERY: '200ms' };
    const relay = startApp(h.env, 'dist/apps/relay/main.js', [], env);
    const db = openDatabase(h.env.dir);
    try {
      createOrderService(db).placeOrder({ sku: 'SKU-1', qty: 1 });
      await waitFor(async () => (await partitions().clients[0].hget(keys.meta, 'partition')) === `0/${PARTITIONS}`, { timeoutMs: 20_000, message: relay.output() });
    } finally {
      db.close();
      assert.equal((await stopApp(relay)).code, 0, relay.output());
    }
    for (const [app, partitions, refusal] of [
      ['relay', '2', /holds partition 0\/3 \(of 3\), not 0\/2: set --partitions \/ OUTBOX_PARTITIONS to 3 on every relay and consumer/],
      ['consumer', '4', /holds partition 0\/3 \(of 3\), not 0\/4: set --partitions \/ OUTBOX_PARTITIONS to 3/],
      ['consumer', '1', /holds 3 partitions, not 1: set --partitions \/ OUTBOX_PARTITIONS to 3/],
    ] as const) {
      const wrong = startApp(h.env, `dist/apps/${app}/main.js`, [], { OUTBOX_PARTITIONS: partitions });
      const { code } = await wrong.exited;
      assert.equal(code, 78, wrong.output());
      assert.match(wrong.output(), refusal);
      assert.doesNotMatch(wrong.output(), /\n\s+at /, 'no stack trace');
    }
    assert.equal(await partitions().clients[0].hget(keys.meta, 'partition'), `0/${PARTITIONS}`, 'Redis unchanged');
  });
});
