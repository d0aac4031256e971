import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { keys } from '../shared/outbox/redis/keys.js';
import { RELAY_QUEUE } from '../shared/outbox/relay/relay-worker.js';
import { sleep } from '../shared/outbox/sleep.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp, type App } from './helpers/apps.js';
import { runCli, type CliEnv } from './helpers/cli.js';
import { monitorWhile } from './helpers/redis-monitor.js';
import { useHarness } from './helpers/harness.js';
import { count, storeIdIn, tempDir } from './helpers/stores.js';

const h = useHarness();

const RELAY = 'dist/apps/relay/main.js';
const BATCH = 1000;
const LOCK_MS = 2000;
const RELAY_ARGS = ['--every', '300ms', '--slice', '300ms', '--lock-duration', `${LOCK_MS}ms`, '--batch-size', String(BATCH)];
/** RELAY_ARGS with the values of the flags `values` names replaced. */
const relayArgs = (values: Record<string, string>) => RELAY_ARGS.map((arg, i) => values[RELAY_ARGS[i - 1]] ?? arg);
// At debug: the tests read the `batch relayed` lines, and a stack (written only at debug) would show.
const DEBUG = { OUTBOX_LOG_LEVEL: 'debug' };

const pending = (dir: string) => count(dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'");
const pushes = async () => Number((await h.client.get(keys.enqueued)) ?? 0);
const logsOf = (relays: App[]) => relays.map((relay) => relay.output()).join('');
const linesMatching = (text: string, pattern: RegExp) => text.split('\n').filter((line) => pattern.test(line)).length;

/** Writes zeros into `<dir>/filler` until the file system says ENOSPC. */
function fillDisk(dir: string): void {
  const fd = openSync(join(dir, 'filler'), 'w');
  try {
    for (const size of [1 << 16, 1 << 12, 1 << 9]) {
      const chunk = Buffer.alloc(size);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
      }
    }
  } finally {
    closeSync(fd);
  }
}

describe('one relay pass at a time, with app.db locked or full', () => {
  it('a writer holding app.db longer than the relay lock: no takeover, at most one batch pushed twice, every row published', async (t) => {
    const rows = 20_000;
    await h.cli('place-order', '--count', String(rows));
    // Another writer takes the write lock before the relays start, and keeps it past their lock.
    const writer = new Database(join(h.env.dir, 'app.db'));
    writer.pragma('busy_timeout = 5000');
    writer.exec('BEGIN IMMEDIATE');
    const relays = [startApp(h.env, RELAY, RELAY_ARGS, DEBUG), startApp(h.env, RELAY, RELAY_ARGS, DEBUG)];
    try {
      try {
        await waitFor(async () => (await pushes()) > 0, { timeoutMs: 10_000, message: 'no relay pushed while the writer held app.db' });
        // The fault itself: the write lock stays taken for longer than a relay job's lock.
        await sleep(LOCK_MS * 1.75);
      } finally {
        writer.exec('ROLLBACK');
        writer.close();
      }
      await waitFor(() => pending(h.env.dir) === 0, { timeoutMs: 30_000, message: 'rows left PENDING after the writer let go' });
      const logs = logsOf(relays);
      t.diagnostic(`pushes: ${await pushes()} for ${rows} rows`);
      assert.ok((await pushes()) - rows <= BATCH, `${(await pushes()) - rows} rows pushed twice, more than one batch (${BATCH})`);
      assert.equal(count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED'"), rows);
      assert.doesNotMatch(logs, /stalled|Lock mismatch|Missing lock|job lock/);
      assert.equal(linesMatching(logs, /"msg":"app\.db is locked by another writer \(SQLITE_BUSY\): relay backing off"/), 1, logs);
      assert.doesNotMatch(logs, /"stack"/);
    } finally {
      await Promise.all(relays.map((relay) => stopApp(relay)));
    }
  });

  it('a relay frozen past its lock is taken over, and once it wakes it stops before its next write: at most its in-flight batches pushed twice', async (t) => {
    const rows = 20_000;
    const batch = 100;
    // A slice far longer than a few batches: the relay frozen just after a batch is then in the
    // middle of its pass, with writes to come. With the 300 ms slice, on a loaded machine the first
    // batches took longer than the slice, and the relay was frozen after the pass's last lock check,
    // with no write left in it to stop: it never had to say that it lost its lock.
    const args = relayArgs({ '--batch-size': String(batch), '--slice': '20s' });
    await h.cli('place-order', '--count', String(rows));
    // `batch relayed` (a debug line) tells when each relay last marked a batch.
    const relays = [startApp(h.env, RELAY, args, DEBUG), startApp(h.env, RELAY, args, DEBUG)];
    try {
      await waitFor(() => linesMatching(logsOf(relays), /"msg":"relay started"/) === 2, { timeoutMs: 10_000 });
      // Freeze the relay that is relaying right now: the one that logged a batch last.
      const lastBatchAt = (relay: App) => relay.output().match(/"time":"[^"]+"(?=[^\n]*"msg":"batch relayed")/g)?.pop() ?? '';
      await waitFor(() => relays.some((relay) => lastBatchAt(relay) !== ''), { timeoutMs: 10_000, intervalMs: 1, message: 'no relay started relaying' });
      const [frozen, other] = lastBatchAt(relays[0]) > lastBatchAt(relays[1]) ? relays : [relays[1], relays[0]];
      frozen.child.kill('SIGSTOP');
      try {
        await waitFor(() => /"msg":"relay job stalled: its lock expired \(relay process died or blocked\); another relay takes over"/.test(other.output()), {
          timeoutMs: 15_000,
          message: 'the frozen relay\'s job was not taken over',
        });
      } finally {
        frozen.child.kill('SIGCONT');
      }
      const marksBeforeWaking = linesMatching(frozen.output(), /"msg":"batch relayed"/);
      await waitFor(() => pending(h.env.dir) === 0, { timeoutMs: 30_000, message: 'rows left PENDING' });
      t.diagnostic(`pushes: ${await pushes()} for ${rows} rows`);
      // In flight with a backlog: the batch being marked and the two pushed after it (relayPass).
      assert.ok((await pushes()) - rows <= 3 * batch, `${(await pushes()) - rows} rows pushed twice, more than the three batches in flight (${3 * batch})`);
      await waitFor(() => /job lock/.test(frozen.output()), { timeoutMs: 10_000, message: `the woken relay did not notice it lost its lock:\n${frozen.output()}` });
      const untilNoticed = frozen.output().slice(0, frozen.output().search(/[^\n]*job lock/));
      // A relay frozen between a mark and its log line writes that line once it wakes: one line more
      // than was read before waking is that late line; two would be a mark after waking.
      assert.ok(
        linesMatching(untilNoticed, /"msg":"batch relayed"/) <= marksBeforeWaking + 1,
        'the woken relay marked a batch before it noticed its lock was gone',
      );
      assert.doesNotMatch(logsOf(relays), /"stack"/);
    } finally {
      await Promise.all(relays.map((relay) => stopApp(relay)));
    }
  });

  it('a relay frozen in a pass with nothing to relay until its slice and its lock ran out: once it wakes it ends that pass as lost and writes nothing for it, not even its last-run record', async () => {
    const sliceMs = 1000;
    const args = relayArgs({ '--slice': `${sliceMs}ms` });
    const relay = startApp(h.env, RELAY, args, DEBUG);
    const active = `bull:${RELAY_QUEUE}:active`;
    try {
      await waitFor(() => /"msg":"relay started"/.test(relay.output()), { timeoutMs: 10_000 });
      // Stopped early in a pass: its job stays active, and its lock (2 s, past the 1 s slice) runs out
      // with nobody to renew it. Not near the pass's end: a write it decided just before the stop
      // (its last-run record) would go out on waking (ioredis sends on the next tick), and that is
      // not the case here. A stop between passes, or late in one, is undone and tried again.
      const frozenJob = (await waitFor(
        async () => {
          relay.child.kill('SIGSTOP');
          const stoppedAt = Date.now();
          const [job] = await h.client.lrange(active, 0, -1);
          const processedOn = job === undefined ? undefined : Number(await h.client.hget(`bull:${RELAY_QUEUE}:${job}`, 'processedOn'));
          if (job !== undefined && processedOn !== undefined && stoppedAt - processedOn < sliceMs / 2) {
            await waitFor(async () => (await h.client.exists(`bull:${RELAY_QUEUE}:${job}:lock`)) === 0, { timeoutMs: LOCK_MS * 3, message: 'the frozen job\'s lock did not run out' });
            if ((await h.client.lrange(active, 0, -1)).includes(job)) return job;
          }
          relay.child.kill('SIGCONT');
          return undefined;
        },
        { timeoutMs: 20_000, intervalMs: 1, message: 'the relay was never stopped early in a pass' },
      ))!;
      // Each record says when its pass ended (`at`) and how long it ran; a pass that started before
      // the relay woke is the lost one (BullMQ runs the stalled job again after, under the same id).
      const lastRuns: string[][] = [];
      const wokeAt = Date.now();
      await monitorWhile(
        h.env.redisUrl,
        (args) => {
          if (args[0]?.toLowerCase() === 'hset' && args[1] === keys.relayLastRun) lastRuns.push(args);
        },
        async () => {
          relay.child.kill('SIGCONT');
          await waitFor(() => new RegExp(`job lock \\(job ${frozenJob}\\)`).test(relay.output()), { message: `the woken relay did not say its pass lost its lock:\n${relay.output()}` });
          // The passes after it record their runs: the relay went on.
          await waitFor(() => lastRuns.length > 0, { message: 'no pass recorded its run after the relay woke' });
        },
      );
      const startedBeforeWaking = lastRuns.filter((args) => {
        const field = (name: string) => Number(args[args.indexOf(name) + 1]);
        return field('at') - field('durationMs') < wokeAt;
      });
      assert.deepEqual(startedBeforeWaking, [], 'the woken relay recorded the run of the pass it had lost');
      assert.doesNotMatch(relay.output(), /"stack"/);
    } finally {
      relay.child.kill('SIGCONT');
      await stopApp(relay);
    }
  });

  it('a full disk under app.db: the relay says so once, pushes no row again meanwhile, and relays everything once there is room', async (t) => {
    const dir = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir]);
    const env: CliEnv = { dir, redisUrl: h.env.redisUrl };
    let relays: App[] = [];
    try {
      assert.equal((await runCli(['init'], env)).code, 0);
      await h.client.hset(keys.meta, 'store', storeIdIn(dir));
      // A lock that outlasts the Redis write pause below (a lock renewal is a write it holds back):
      // placing the orders and filling the disk take a few seconds on a loaded machine.
      const args = relayArgs({ '--lock-duration': '8000ms' });
      relays = [startApp(env, RELAY, args, DEBUG), startApp(env, RELAY, args, DEBUG)];
      await waitFor(() => linesMatching(logsOf(relays), /"msg":"relay started"/) === 2, { timeoutMs: 10_000 });
      const rows = 81;
      // Pushes wait in Redis while the orders are placed and the disk fills up: the marks find it full.
      await h.client.call('CLIENT', 'PAUSE', '10000', 'WRITE');
      try {
        assert.equal((await runCli(['place-order', '--count', String(rows)], env)).code, 0);
        fillDisk(dir);
      } finally {
        await h.client.call('CLIENT', 'UNPAUSE');
      }
      // The first pass may have read only the orders committed by then: the relay holds that batch
      // (it cannot mark it) and reads no further until the disk has room.
      const diskFull = /"msg":"app\.db's disk is full \(SQLITE_FULL\): relay backing off"/;
      await waitFor(async () => (await pushes()) > 0 && diskFull.test(logsOf(relays)), { timeoutMs: 10_000, message: 'no relay pushed and met the full disk' });
      const firstPushes = await pushes();
      // The fault lasts: the relays keep running against a full disk.
      await sleep(3000);
      const duringFault = await pushes();
      t.diagnostic(`pushes while the disk was full: ${firstPushes}, then ${duringFault}, for ${rows} rows`);
      assert.equal(pending(dir), rows);
      assert.ok(duringFault - firstPushes <= rows, `${duringFault - firstPushes} rows pushed again while the disk was full (one batch is at most ${rows})`);
      rmSync(join(dir, 'filler'));
      const resumes = /"msg":"app\.db accepts the relay's writes again: relaying resumes"/;
      // The log lines reach this process after the rows are marked: both are awaited.
      await waitFor(() => pending(dir) === 0 && resumes.test(logsOf(relays)), { timeoutMs: 15_000, message: 'rows left PENDING, or no resume line, once the disk had room' });
      const logs = logsOf(relays);
      assert.ok((await pushes()) - rows <= rows, `${(await pushes()) - rows} rows pushed twice (one batch is ${rows})`);
      assert.equal(linesMatching(logs, diskFull), 1, logs);
      assert.doesNotMatch(logs, /stalled|Lock mismatch|Missing lock|job lock|"stack"/);
    } finally {
      await Promise.all(relays.map((relay) => stopApp(relay)));
      execFileSync('umount', [dir]);
    }
  });
});
