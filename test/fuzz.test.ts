import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { seededRandom } from '../shared/lab/random.js';
import { useHarness } from './helpers/harness.js';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

const h = useHarness();

const valid = (aggregateId: number) => ({
  event_id: `valid-${aggregateId}`,
  aggregate_id: `order:${aggregateId}`,
  seq: 1,
  event_type: 'OrderPlaced',
  payload: { orderId: aggregateId, sku: 'SKU-F', qty: 1 },
  store_id: h.storeId,
});

/** Seeded malformed queue entries: each one must be dead-lettered, none may crash the consumer. */
function malformedEntries(seed: number, count: number): (string | Buffer)[] {
  const random = seededRandom(seed);
  const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)];
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256)));
  const badNumbers = [null, true, 0, -1, 1.5, 1e300, '', 'x', '1', [], {}, Number.MAX_SAFE_INTEGER + 2];
  const badStrings = [null, true, 0, '', [], {}, 'é'.repeat(200)];
  const mutations: (() => string | Buffer)[] = [
    () => Buffer.concat([Buffer.from('{"event_id":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]),
    () => bytes(1 + Math.floor(random() * 64)),
    () => JSON.stringify(valid(1)).slice(0, Math.floor(random() * 60)),
    () => JSON.stringify(pick([null, 42, 'text', [1, 2], true])),
    () => '['.repeat(5000) + ']'.repeat(5000),
    () => `{"event_id":"big","pad":"${'x'.repeat(1 << 20)}"}`,
    () => {
      const event = valid(100_000 + Math.floor(random() * 1000)) as Record<string, unknown>;
      delete event[pick(['event_id', 'aggregate_id', 'seq', 'event_type', 'payload', 'store_id'])];
      return JSON.stringify(event);
    },
    () => {
      const event = valid(200_000) as Record<string, unknown>;
      const field = pick(['event_id', 'aggregate_id', 'seq', 'event_type', 'payload', 'store_id']);
      event[field] = field === 'event_id' ? pick([null, 0, '', 'e'.repeat(129)]) : field === 'event_type' ? pick(badStrings) : pick(badNumbers);
      return JSON.stringify(event);
    },
    () => {
      const event = valid(300_000);
      const field = pick(['orderId', 'sku', 'qty']);
      (event.payload as Record<string, unknown>)[field] = pick(field === 'sku' ? badStrings : badNumbers);
      return JSON.stringify(event);
    },
    () => JSON.stringify({ ...valid(400_000), event_type: pick(['OrderShipped', 'orderplaced', 'constructor', '__proto__']) }),
    () => JSON.stringify({ ...valid(500_000), event_type: 'OrderQtyChanged', payload: { orderId: 500_000, sku: 'SKU-F', qty: 2 } }),
    () => '{"__proto__":{"polluted":true},"event_id":"p","aggregate_id":"order:1","seq":1,"event_type":"OrderPlaced","payload":1}',
  ];
  return Array.from({ length: count }, () => pick(mutations)());
}

/** Interleaves `bad` with valid events on the queue; resolves the valid event ids. */
async function fillQueue(seed: number, bad: (string | Buffer)[]): Promise<string[]> {
  const random = seededRandom(seed + 1);
  const validIds: string[] = [];
  let aggregate = 1;
  for (const entry of bad) {
    if (random() < 0.5) {
      const event = valid(aggregate++);
      validIds.push(event.event_id);
      await h.client.rpush('outbox.events', JSON.stringify(event));
    }
    await h.client.rpush('outbox.events', entry);
  }
  return validIds;
}

async function assertEveryEntryAccountedFor(validIds: string[], bad: (string | Buffer)[]) {
  assert.equal(await h.client.llen('outbox.events'), 0);
  assert.deepEqual(await h.client.keys('outbox.events:processing:*').then((keys) => Promise.all(keys.map((k) => h.client.llen(k)))).then((l) => l.filter(Boolean)), []);
  assert.deepEqual((await h.client.hkeys('processed')).sort(), [...validIds].sort());
  const dead = await h.client.lrangeBuffer('outbox.events:dead', 0, -1);
  assert.equal(dead.length, bad.length, 'every malformed entry is dead-lettered');
  const textual = bad.filter((entry): entry is string => typeof entry === 'string');
  const deadText = dead.map((entry) => JSON.parse(entry.toString()) as { reason: string; message: string });
  for (const entry of deadText) assert.ok(entry.reason.length > 0, 'every dead letter has a reason');
  assert.deepEqual(
    deadText.map((d) => d.message).filter((m) => textual.includes(m)).length,
    textual.length,
    'each textual entry is kept as it was',
  );
  assert.equal(await h.client.get('outbox.polluted'), null);
}

describe('fuzzing the consumer with malformed queue entries', () => {
  it('outbox consume dead-letters every bad entry with its reason and applies every valid event', async () => {
    const bad = malformedEntries(42, 300);
    const validIds = await fillQueue(42, bad);
    const result = await h.cli('consume');
    assert.match(result.stdout, new RegExp(`applied ${validIds.length}, .*dead-lettered ${bad.length}`));
    await assertEveryEntryAccountedFor(validIds, bad);
  });

  it('the long-running consumer app does the same and keeps running', async () => {
    const bad = malformedEntries(7, 300);
    const validIds = await fillQueue(7, bad);
    const app = spawn(process.execPath, [join(REPO_ROOT, 'dist/apps/consumer/main.js')], {
      env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    app.stdout.on('data', (chunk) => (output += chunk));
    app.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => app.on('exit', (code) => resolve(code)));
    try {
      await waitFor(async () => (await h.client.llen('outbox.events:dead')) === bad.length && (await h.client.hlen('processed')) === validIds.length, {
        timeoutMs: 20_000,
        message: 'the consumer app did not handle every entry',
      });
      assert.equal(app.exitCode, null, `the consumer app exited:\n${output}`);
    } finally {
      app.kill('SIGTERM');
    }
    assert.equal(await exited, 0, output);
    await assertEveryEntryAccountedFor(validIds, bad);
  });
});
