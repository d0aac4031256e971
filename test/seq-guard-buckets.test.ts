import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { handlers } from '../shared/lab/orders/order-handlers.js';
import { createConsumer } from '../shared/outbox/consumer/create-consumer.js';
import { guardKeyOf } from '../shared/outbox/redis/guards.js';
import { runCli } from './helpers/cli.js';
import { guardOf, guardsOf } from './helpers/guards.js';
import { useHarness } from './helpers/harness.js';
import { configOfEnv, orders } from './helpers/orders.js';
import { withPartitions } from '../apps/cli/stores.js';

// Seq guards in bucket hashes (issue 29): small hashes Redis keeps as listpacks, counted in the
// window hash; a Redis written by the layout before buckets (one hash) is read and migrated.
// A private redis-server, app.db, and the consumer through the library.
const h = useHarness();
const o = orders(() => h.env);

async function consume(): Promise<void> {
  await withPartitions(configOfEnv(h.env), async (partitions) => {
    await (await createConsumer({ redis: partitions, handlers, consumerId: 'cli' })).drain();
  });
}

describe('seq guards in buckets', () => {
  it('each guard sits in its bucket, a listpack; the window hash counts them; no single hash grows', async () => {
    o.place(200);
    for (let id = 1; id <= 50; id += 1) o.changeQty(id, 2);
    await o.relay();
    await consume();
    const guards = await guardsOf(h.client);
    assert.equal(Object.keys(guards).length, 200);
    assert.equal(guards['order:1'], '2');
    assert.equal(guards['order:200'], '1');
    assert.equal(await h.client.exists('outbox:applied-seq'), 0, 'the old single hash is not written');
    assert.equal(await h.client.hget('outbox:window', 'guards'), '200');
    for (const aggregate of ['order:1', 'order:77', 'order:200']) {
      assert.equal(await h.client.call('OBJECT', 'ENCODING', guardKeyOf(aggregate)), 'listpack');
    }
    const status = JSON.parse((await runCli(['status', '--json'], h.env)).stdout);
    assert.equal(status.memory.aggregates, 200);
    assert.ok(status.memory.bytesPerAggregate > 0);
  });

  it('a Redis of the layout before buckets: its guards hold (duplicates skipped, the next seq applied), then move into buckets', async () => {
    o.place(3);
    o.changeQty(1, 4);
    await o.relay();
    await consume();
    // As the version before buckets left it: every guard in one hash, no count.
    const before = await guardsOf(h.client);
    await h.client.unlink(...Object.keys(before).map(guardKeyOf));
    await h.client.hdel('outbox:window', 'guards');
    await h.client.hset('outbox:applied-seq', before);

    // Every event again (a redelivery), and one new event of order 2.
    assert.equal((await runCli(['replay', '--from', '1'], h.env)).code, 0);
    o.changeQty(2, 6);
    await o.relay();
    await consume();
    assert.equal(await h.client.hget('inventory:reserved', 'SKU-1'), String(4 + 6 + 1), 'each event applied once');
    assert.equal(await h.client.hget('outbox:stats', 'duplicates'), '4');
    assert.equal(await h.client.exists('outbox:applied-seq'), 0, 'the drain moved every guard into its bucket');
    assert.deepEqual(await guardsOf(h.client), { 'order:1': '2', 'order:2': '2', 'order:3': '1' });
    assert.equal(await guardOf(h.client, 'order:2'), '2');
    assert.equal(await h.client.hget('outbox:window', 'guards'), '3');
  });
});
