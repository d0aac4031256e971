import assert from 'node:assert/strict';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { startApp, stopApps } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

// ioredis sends again, after a reconnect, every command whose reply the lost connection did not
// bring back. A take (BLMOVE, move-to-processing) that Redis ran but whose reply was lost moved
// messages into the processing list that the consumer never saw: sent again, it takes the next
// ones. Here a proxy between the consumer app and Redis loses exactly such a reply.
const h = useHarness();

/** A TCP proxy to Redis that, once armed, swallows the next reply to a BLMOVE and cuts that connection. */
function replyLosingProxy(target: () => number) {
  let armed = false;
  let fired = false;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection(target(), '127.0.0.1');
    sockets.add(client).add(upstream);
    let waitingForTake = false;
    client.on('data', (chunk) => {
      waitingForTake = /blmove/i.test(chunk.toString('latin1'));
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (armed && waitingForTake) {
        armed = false;
        fired = true;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    for (const socket of [client, upstream]) socket.on('error', () => {}).on('close', () => (client.destroy(), upstream.destroy()));
  });
  return {
    listen: () => new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port))),
    arm: () => ((armed = true), (fired = false)),
    fired: () => fired,
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

function message(aggregateId: number, seq: number) {
  return `{"event_id":"evt-${aggregateId}-${seq}","aggregate_id":"order:${aggregateId}","seq":${seq},"event_type":"OrderPlaced","payload":{"orderId":${aggregateId},"sku":"SKU-X","qty":1},"store_id":"${h.storeId}"}`;
}

describe('a take Redis ran whose reply was lost', () => {
  const proxy = replyLosingProxy(() => Number(new URL(h.redis.url).port));
  let port: number;
  before(async () => {
    port = await proxy.listen();
  });
  after(() => proxy.close());

  it('the consumer app applies the messages that take moved, once it is connected again (nothing stays in its processing list)', async () => {
    const consumer = startApp(h.env, 'dist/apps/consumer/main.js', [], { REDIS_URL: `redis://127.0.0.1:${port}`, OUTBOX_CONSUMER_ID: 'resent' });
    try {
      await waitFor(() => /"msg":"consumer started"/.test(consumer.output()), { timeoutMs: 20_000, message: consumer.output() });
      // Idle: its taking connection waits in BLMOVE. The reply that would bring the event back is lost.
      proxy.arm();
      await h.client.rpush('outbox.events', message(1, 1));
      await waitFor(() => proxy.fired(), { timeoutMs: 10_000, message: 'no BLMOVE reply to lose' });
      // Afterwards, the aggregate's next event arrives through a connection that works.
      await h.client.rpush('outbox.events', message(1, 2));
      await waitFor(async () => (await h.client.hget('inventory:reserved', 'SKU-X')) === '2', {
        timeoutMs: 15_000,
        message: `not both applied: processing list ${JSON.stringify(await h.client.lrange('outbox.events:processing:resent', 0, -1))}, parked ${await h.client.hlen('outbox.events:parked')}\n${consumer.output()}`,
      });
      assert.equal(await h.client.llen('outbox.events:processing:resent'), 0);
      assert.equal(await h.client.hlen('outbox.events:parked'), 0);
    } finally {
      await stopApps([consumer]);
    }
  });
});
