import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readList, readListBackwards } from '../shared/outbox/redis/read-list.js';
import { freePort } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { runCli, startCli } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { count } from './helpers/stores.js';

// verify against a live system: a producer generating traffic, a relay and a consumer, real
// processes. Events in flight must not fail it; a lost event must, traffic or not.
const h = useHarness();

const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';
const PRODUCER = 'dist/apps/producer/main.js';
const RATE = '300';

async function startSystem(): Promise<App[]> {
  const port = await freePort();
  const apps = [startApp(h.env, RELAY), startApp(h.env, CONSUMER), startApp(h.env, PRODUCER, [], { PORT: String(port), OUTBOX_RATE: RATE })];
  // Traffic is flowing end to end.
  await waitFor(async () => (await h.client.hlen('processed')) >= 300, { timeoutMs: 30_000, message: 'no traffic got through' });
  return apps;
}

/** Every event in flight at the snapshot was applied within the window; returns how many there were. */
function assertSettled(stdout: string): number {
  const settled = /in flight at the snapshot \/ applied within 5s +- +(\d+) \/ (\d+) +info/.exec(stdout);
  if (!settled) return 0;
  assert.equal(settled[2], settled[1], 'every event in flight at the snapshot was applied within the window');
  return Number(settled[1]);
}

describe('verify under traffic', () => {
  it(`--settle 5s exits 0 run after run while orders flow at ${RATE} operations/s, though events are in flight at each snapshot`, async () => {
    const apps = await startSystem();
    const consumer = apps[1];
    try {
      // Plain runs under traffic: whatever the snapshot catches in flight is applied in the window.
      for (let run = 0; run < 2; run += 1) {
        const result = await runCli(['verify', '--settle', '5s'], h.env);
        assert.equal(result.code, 0, result.stdout + result.stderr);
        assert.match(result.stdout, /VERIFY OK/);
        assertSettled(result.stdout);
      }
      // Runs whose snapshot surely holds events in flight: the consumer is held until verify says it
      // took the snapshot and waits, then let go, while the producer and relay go on.
      for (let run = 0; run < 3; run += 1) {
        consumer.child.kill('SIGSTOP');
        try {
          await waitFor(async () => (await h.client.llen('outbox.events')) > 0, { message: 'nothing queued while the consumer was held' });
          const verify = startCli(['verify', '--settle', '5s'], h.env);
          await waitFor(() => /in flight at the snapshot; waiting up to 5s/.test(verify.stderr()), { timeoutMs: 10_000, message: 'verify never said it was waiting' });
          consumer.child.kill('SIGCONT');
          const result = await verify.done;
          assert.equal(result.code, 0, result.stdout + result.stderr);
          assert.match(result.stdout, /VERIFY OK/);
          assert.ok(assertSettled(result.stdout) > 0, `the snapshot held events in flight:\n${result.stdout}`);
        } finally {
          consumer.child.kill('SIGCONT');
        }
      }
      // The strict snapshot of the same traffic fails on events in flight: what verify did before --settle.
      consumer.child.kill('SIGSTOP');
      try {
        await waitFor(async () => (await h.client.llen('outbox.events')) > 0, { message: 'nothing queued while the consumer was held' });
        const strict = await runCli(['verify', '--settle', '0s'], h.env);
        assert.equal(strict.code, 1, strict.stdout + strict.stderr);
        assert.match(strict.stdout, /VERIFY FAILED/);
        assert.doesNotMatch(strict.stderr, /waiting up to/);
      } finally {
        consumer.child.kill('SIGCONT');
      }
    } finally {
      await Promise.all(apps.map((app) => stopApp(app)));
    }
  });

  it('names an event lost under traffic (deleted from the queue after the relay marked it) and exits 1', async () => {
    const apps = await startSystem();
    const consumer = apps[1];
    let lost: string;
    try {
      // Hold the consumer so that messages stay in the queue, and delete the head, one the relay marked
      // and nothing applied. A take the consumer sent just before the stop may still move the head
      // away between reading it and deleting it (it then sits in the consumer's processing list, not
      // lost): then the new head is taken instead.
      consumer.child.kill('SIGSTOP');
      lost = await waitFor(
        async () => {
          const message = await h.client.lindex('outbox.events', 0);
          if (message === null) return '';
          const eventId: string = JSON.parse(message).event_id;
          if (count(h.env.dir, `SELECT COUNT(*) FROM outbox WHERE event_id = '${eventId}' AND status = 'PUBLISHED'`) !== 1) return '';
          if ((await h.client.hexists('processed', eventId)) === 1) return '';
          return (await h.client.lrem('outbox.events', 0, message)) === 1 ? eventId : '';
        },
        { message: 'no queued event the relay marked could be deleted' },
      );
      consumer.child.kill('SIGCONT');

      const result = await runCli(['verify', '--settle', '2s'], h.env);
      assert.equal(result.code, 1, result.stdout + result.stderr);
      assert.match(result.stdout, new RegExp(`events lost \\(never applied, not in Redis\\) +0 +1 +FAIL\\n +e\\.g\\. ${lost}\\n`));
      assert.match(result.stdout, /VERIFY FAILED/);
      // Traffic went on throughout: the rest was in flight, not lost.
      assert.equal(count(h.env.dir, `SELECT COUNT(*) FROM outbox WHERE event_id = '${lost}' AND status = 'PUBLISHED'`), 1);
    } finally {
      consumer.child.kill('SIGCONT');
      await Promise.all(apps.map((app) => stopApp(app)));
    }

    // verify --repair republishes exactly that event; once applied, verify is OK again.
    const repaired = await runCli(['verify', '--repair', '--settle', '0s'], h.env);
    assert.match(repaired.stdout, /republished 1 lost event/);
    await h.cli('consume');
    assert.match((await h.cli('verify')).stdout, /VERIFY OK/);
  });
});

describe('reading a list while consumers take from it', () => {
  /** Reads m0..m9 in chunks of 3 with `read`; after each of the first two chunks a take of 2 from the head and a push at the tail. Resolves what was read. */
  async function readWhileTaken(read: typeof readList): Promise<Set<string>> {
    const key = 'outbox.events';
    await h.client.rpush(key, ...Array.from({ length: 10 }, (_, i) => `m${i}`));
    const seen = new Set<string>();
    let items = 0;
    for await (const message of read(h.client, key, 3)) {
      seen.add(message);
      items += 1;
      if (items === 3 || items === 6) {
        await h.client.ltrim(key, 2, -1);
        await h.client.rpush(key, `new${items}`);
      }
    }
    await h.client.del(key);
    return seen;
  }

  it("back to front (verify's snapshot) every message that stays in the list is read, though takes at its head and pushes at its tail come between its chunks; front to back some are skipped", async () => {
    const stayed = ['m4', 'm5', 'm6', 'm7', 'm8', 'm9'];
    const backwards = await readWhileTaken(readListBackwards);
    assert.deepEqual(stayed.filter((m) => !backwards.has(m)), []);
    const forwards = await readWhileTaken(readList);
    assert.notDeepEqual(stayed.filter((m) => !forwards.has(m)), [], 'the interleaving is one that skips messages front to back');
  });
});
