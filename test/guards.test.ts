import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { CLI_PATH, runCli, type CliResult } from './helpers/cli.js';
import { useHarness } from './helpers/harness.js';
import { orders } from './helpers/orders.js';
import { count, readDb, snapshotStores } from './helpers/stores.js';

const h = useHarness();
const o = orders(() => h.env);

/**
 * Both stores, with the tables snapshotStores leaves out (what prune records, the replay
 * generation), and hash fields sorted: HGETALL's order may change when Redis rehashes on a read.
 */
async function snapshot(): Promise<string> {
  const stores = JSON.parse(await snapshotStores(h.env.dir, h.env.redisUrl)) as { sqlite: string; redis: unknown[][] };
  const redis = stores.redis.map(([key, value, ...rest]) =>
    value !== null && typeof value === 'object' && !Array.isArray(value) ? [key, Object.entries(value).sort(([a], [b]) => a.localeCompare(b))] : [key, value, ...rest],
  );
  const db = readDb(h.env.dir);
  try {
    return JSON.stringify([stores.sqlite, redis, db.prepare('SELECT * FROM outbox_pruned').all(), db.prepare('SELECT * FROM outbox_meta ORDER BY key').all()]);
  } finally {
    db.close();
  }
}

/**
 * Runs `outbox <args>` on a real pseudo-terminal (util-linux `script`), typing `answer` into it
 * ("\x04" is Ctrl-D: end of input). Killed after 20 s, so a command waiting for more input fails the test instead of hanging it.
 */
function onTerminal(args: string[], answer: string): Promise<CliResult> {
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const command = [process.execPath, CLI_PATH, ...args].map(quote).join(' ');
  const child = spawn('script', ['-qec', command, '/dev/null'], {
    env: { ...process.env, OUTBOX_DIR: h.env.dir, REDIS_URL: h.env.redisUrl, OUTBOX_CRASH_POINTS: '' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stdin.end(answer);
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: stdout.replace(/\r/g, ''), stderr: '' });
    });
  });
}

function replayGeneration(): number {
  return count(h.env.dir, "SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'replay_generation'");
}

/** `orderCount` orders, relayed and applied (in this process): as many PUBLISHED rows the consumer applied. */
async function applied(orderCount: number): Promise<void> {
  o.place(orderCount);
  await o.relay();
  await o.consume();
}

/** The "… would …" line and the count it names, e.g. `replay would set 16 …` → 16. */
function planned(result: CliResult, pattern: RegExp): number {
  const match = pattern.exec(result.stdout);
  assert.ok(match, `no ${pattern} in:\n${result.stdout}`);
  assert.match(result.stdout, /^dry run: nothing changed$/m);
  return Number(match[1]);
}

describe('--dry-run changes nothing and shows what the real run then does', () => {
  it('replay: the count, the id range and the first rows, then the real run sets exactly those back to PENDING', async () => {
    await applied(16);
    const before = await snapshot();
    const dry = await h.cli('replay', '--from', '3', '--dry-run');
    assert.equal(await snapshot(), before);
    assert.equal(planned(dry, /^replay would set (\d+) PUBLISHED row\(s\) \(ids 3-16\) back to PENDING$/m), 14);
    assert.match(dry.stdout, /^ {2}id 3 {2}order:3 seq 1 {2}OrderPlaced {2}created \S+ {2}event [0-9a-f-]{36}$/m);
    assert.match(dry.stdout, /^ {2}… and 9 more$/m);

    const real = await h.cli('replay', '--from', '3');
    assert.match(real.stdout, /^14 row\(s\) set back to PENDING/m);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING' AND id BETWEEN 3 AND 16"), 14);
    assert.equal(replayGeneration(), 1, 'a replay bumps the replay generation, so a paused relay cannot undo it');
  });

  it('prune: what it would delete and keep, then the real run deletes and keeps the same', async () => {
    await applied(14);
    o.place(3);
    await o.relay();
    const before = await snapshot();
    const dry = await h.cli('prune', '--older-than', '0s', '--batch-size', '5', '--dry-run');
    assert.equal(await snapshot(), before);
    assert.equal(planned(dry, /^prune would delete (\d+) PUBLISHED row\(s\) \(ids 1-14\) the consumer applied; kept \(not applied yet\): 3$/m), 14);
    assert.match(dry.stdout, /^ {2}id 1 {2}order:1 seq 1 {2}OrderPlaced /m);

    const real = await h.cli('prune', '--older-than', '0s', '--batch-size', '5');
    assert.match(real.stdout, /^pruned 14 PUBLISHED row\(s\)/m);
    assert.match(real.stdout, /^kept \(not applied yet\): 3$/m);
    assert.equal(count(h.env.dir, 'SELECT MIN(id) FROM outbox'), 15);
  });

  it('init --force: the rows of app.db and the Redis keys it would delete, then the real run deletes those keys', async () => {
    await applied(4);
    const before = await snapshot();
    const dry = await h.cli('init', '--force', '--dry-run');
    assert.equal(await snapshot(), before);
    const keys = planned(dry, /^init --force would delete \S+app\.db with 4 order\(s\), 4 outbox row\(s\) and 0 pruned-aggregate record\(s\), delete (\d+) Redis key\(s\) of this deployment and create a new, empty app\.db$/m);
    assert.equal(keys, await h.client.dbsize());
    // The first keys by name: inventory:reserved, outbox:applied-log, then the guards' buckets.
    assert.match(dry.stdout, /^ {2}key outbox:applied-log\n {2}key outbox:applied-seq:[0-9a-f]{4}$/m);

    const real = await h.cli('init', '--force');
    assert.match(real.stdout, new RegExp(`^cleared ${keys} Redis keys of this project$`, 'm'));
  });

  it('verify --repair: the lost events it would republish, then the real run republishes them', async () => {
    await applied(5);
    o.place(3);
    await o.relay();
    await h.client.ltrim('outbox.events', 2, -1);
    const before = await snapshot();
    const dry = await runCli(['verify', '--repair', '--dry-run'], h.env);
    assert.equal(dry.code, 1, 'nothing was repaired: the invariants still fail');
    assert.equal(await snapshot(), before);
    assert.equal(planned(dry, /^verify --repair would republish (\d+) lost event\(s\): set their rows back to PENDING and relay every PENDING row$/m), 2);
    assert.match(dry.stdout, /^ {2}id 6 {2}order:6 seq 1 .*\n {2}id 7 {2}order:7 seq 1 /m);

    const real = await h.cli('verify', '--repair');
    assert.match(real.stdout, /^repair: republished 2 lost event\(s\)/m);
    assert.equal(replayGeneration(), 1, 'a repair bumps the replay generation, so a paused relay cannot undo it');
  });

  it('verify --repair: when Redis lost its state, the rows a rebuild would set back to PENDING', async () => {
    await applied(12);
    await h.client.flushall();
    const before = await snapshot();
    const dry = await runCli(['verify', '--repair', '--dry-run'], h.env);
    assert.equal(dry.code, 1);
    assert.equal(await snapshot(), before);
    assert.equal(planned(dry, /^verify --repair would rebuild Redis, which lost its state, from SQLite: set (\d+) PUBLISHED row\(s\) \(ids 1-12\) back to PENDING/m), 12);

    const real = await h.cli('verify', '--repair');
    assert.match(real.stdout, /rebuilding it from SQLite, 12 published event\(s\) set back to PENDING/);
  });

  it('dead-letter drop and parked drop: the entries they would drop, then the real run drops them', async () => {
    await h.client.rpush('outbox.events', 'garbage one', 'garbage two');
    await o.consume();
    await h.client.hset('outbox.events:parked', 'order:7:2', JSON.stringify({ reason: 'gap', message: 'm', parkedAt: 1 }));
    const before = await snapshot();
    const dead = await h.cli('dead-letter', 'drop', '--all', '--dry-run');
    const parked = await h.cli('parked', 'drop', '--id', 'order:7:2', '--dry-run');
    assert.equal(await snapshot(), before);
    assert.equal(planned(dead, /^dead-letter drop would drop (\d+) dead-letter entr\(ies\) for good$/m), 2);
    assert.match(dead.stdout, /^ {2}0 {2}\S+ {2}not JSON {2}garbage one$/m);
    assert.equal(planned(parked, /^parked drop would drop (\d+) parked entr\(ies\) for good$/m), 1);

    assert.match((await h.cli('dead-letter', 'drop', '--all')).stdout, /^2 dead-letter entr\(ies\) dropped$/m);
    assert.match((await h.cli('parked', 'drop', '--id', 'order:7:2')).stdout, /^1 parked entr\(ies\) dropped$/m);
  });
});

describe('on a terminal, a change of more than 10 rows is asked about', () => {
  it('replay: "n" changes nothing (exit 6), "y" sets the rows back to PENDING', async () => {
    await applied(16);
    const before = await snapshot();
    const no = await onTerminal(['replay', '--from', '1'], 'n\n');
    assert.match(no.stdout, /replay will set 16 PUBLISHED row\(s\) \(ids 1-16\) back to PENDING\. Go on\? \[y\/N\]/);
    assert.match(no.stdout, /^outbox: replay cancelled: nothing changed/m);
    assert.equal(no.code, 6);
    assert.equal(await snapshot(), before);

    const yes = await onTerminal(['replay', '--from', '1'], 'y\n');
    assert.equal(yes.code, 0, yes.stdout);
    assert.match(yes.stdout, /^16 row\(s\) set back to PENDING/m);
    assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'"), 16);
  });

  it('prune: "n" (or Ctrl-D) deletes nothing, "y" deletes what was shown', async () => {
    await applied(12);
    const before = await snapshot();
    for (const answer of ['n\n', '\x04']) {
      const no = await onTerminal(['prune', '--older-than', '0s'], answer);
      assert.match(no.stdout, /prune will delete 12 PUBLISHED row\(s\) \(ids 1-12\) the consumer applied; kept \(not applied yet\): 0\. Go on\? \[y\/N\]/);
      assert.equal(no.code, 6);
      assert.equal(await snapshot(), before);
    }
    const yes = await onTerminal(['prune', '--older-than', '0s'], 'y\n');
    assert.equal(yes.code, 0, yes.stdout);
    assert.match(yes.stdout, /^pruned 12 PUBLISHED row\(s\)/m);
    assert.equal(count(h.env.dir, 'SELECT COUNT(*) FROM outbox'), 0);
  });

  it('init --force and dead-letter drop: "n" changes nothing', async () => {
    await applied(6);
    await h.client.rpush('outbox.events', ...Array.from({ length: 11 }, (_, i) => `garbage ${i}`));
    await o.consume();
    const before = await snapshot();
    const init = await onTerminal(['init', '--force'], 'n\n');
    assert.match(init.stdout, /init --force will delete \S+app\.db with 6 order\(s\), 6 outbox row\(s\)/);
    assert.equal(init.code, 6);
    const drop = await onTerminal(['dead-letter', 'drop', '--all'], 'n\n');
    assert.match(drop.stdout, /dead-letter drop will drop 11 dead-letter entr\(ies\) for good\. Go on\? \[y\/N\]/);
    assert.equal(drop.code, 6);
    assert.equal(await snapshot(), before);
  });

  it('no question with --yes, nor for 10 rows or fewer', async () => {
    await applied(12);
    const yes = await onTerminal(['replay', '--from', '1', '--yes'], '\x04');
    assert.equal(yes.code, 0, yes.stdout);
    assert.doesNotMatch(yes.stdout, /Go on\?/);
    assert.match(yes.stdout, /^12 row\(s\) set back to PENDING/m);
    await o.relay();
    const few = await onTerminal(['replay', '--from', '3'], '\x04');
    assert.equal(few.code, 0, few.stdout);
    assert.doesNotMatch(few.stdout, /Go on\?/);
    assert.match(few.stdout, /^10 row\(s\) set back to PENDING/m);
  });
});

describe('durations need a unit and cannot be negative', () => {
  for (const [value, message] of [
    ['7', /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "7" without a unit: write 7ms, 7s, 7m, 7h or 7d$/m],
    ['0', /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "0" without a unit: /m],
    ['-1d', /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "-1d", which is negative: write 0s or more, e.g. 7d$/m],
    ['-7', /^outbox: --older-than must be a duration like 60s, 500ms or 2m, got "-7", which is negative: /m],
  ] as const) {
    it(`prune --older-than=${value} is refused in one line (exit 2), both stores unchanged`, async () => {
      await applied(3);
      const before = await snapshot();
      const result = await runCli(['prune', `--older-than=${value}`], h.env);
      assert.equal(result.code, 2);
      assert.match(result.stderr, message);
      assert.equal(result.stderr.trim().split('\n').length, 1);
      assert.equal(await snapshot(), before);
    });
  }
});
