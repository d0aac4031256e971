import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { Pm2, REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { tempDir } from './helpers/stores.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

const APP = 'outbox-relay';
const MAX_BYTES = 20 * 1024;
const RETAIN = 3;
const PASSWORD = 'rotate-s3cret';
const PM2_BIN = join(REPO_ROOT, 'node_modules', 'pm2', 'bin', 'pm2');

let redis: RedisServer;
let redisUrl: string;

before(async () => {
  redis = await RedisServer.start();
  const admin = testClient(redis.url);
  await admin.config('SET', 'requirepass', PASSWORD);
  admin.disconnect();
  redisUrl = redis.url.replace('redis://', `redis://:${PASSWORD}@`);
});

after(async () => {
  await redis?.destroy();
});

/**
 * The relay alone under a private pm2 (ecosystem.config.cjs --only), with a tiny max size and a
 * `relay stats` line (about 130 bytes) every 5 ms: a 20 KB file fills in well under a second.
 */
async function relayUnderPm2(extraEnv: Record<string, string> = {}): Promise<{ pm2: Pm2; logDir: string }> {
  const dir = tempDir();
  const logDir = tempDir();
  const init = await runCli(['init'], { dir, redisUrl });
  assert.equal(init.code, 0, init.stderr);
  const pm2 = new Pm2({
    OUTBOX_DIR: dir,
    REDIS_URL: redisUrl,
    OUTBOX_LOG_DIR: logDir,
    OUTBOX_STATS_EVERY: '5ms',
    OUTBOX_LOG_MAX_SIZE: '20KB',
    OUTBOX_LOG_RETAIN: String(RETAIN),
    ...extraEnv,
  });
  const started = await pm2.run('start', 'ecosystem.config.cjs', '--only', APP);
  assert.equal(started.code, 0, started.stderr);
  return { pm2, logDir };
}

/** The app's log files now: name -> contents (a file rotated away between listing and reading is skipped). */
function logFiles(logDir: string): Map<string, string> {
  const files = new Map<string, string>();
  for (const name of readdirSync(logDir).filter((n) => /^outbox-relay\.log(\.\d+)?$/.test(n)).sort()) {
    try {
      files.set(name, readFileSync(join(logDir, name), 'utf8'));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return files;
}

/** The JSON lines in `text`, also behind the `<id>|<app> | ` prefix that `pm2 logs` puts before each without --raw. */
const entries = (text: string) =>
  text
    .split('\n')
    .filter((line) => line.includes('{"level"'))
    .map((line) => JSON.parse(line.slice(line.indexOf('{"level"'))));

/**
 * Watches the log files until the oldest kept one (.3) was replaced three times (so older ones were
 * deleted), asserting at every look: at most retain + 1 files, each at most the max size + one line,
 * every line whole JSON, no Redis password; with `full`, every rotated file full but for a line.
 */
async function assertBoundedWhileRotating(logDir: string, { full }: { full: boolean }): Promise<void> {
  let longestLine = 0;
  let mostFiles = 0;
  const generations = new Set<string>();
  await waitFor(
    () => {
      const files = logFiles(logDir);
      mostFiles = Math.max(mostFiles, files.size);
      assert.ok(files.size <= RETAIN + 1, `${files.size} log files: ${[...files.keys()].join(', ')}`);
      for (const [name, text] of files) {
        for (const line of text.split('\n')) longestLine = Math.max(longestLine, Buffer.byteLength(line) + 1);
        const bytes = Buffer.byteLength(text);
        assert.ok(bytes <= MAX_BYTES + longestLine, `${name} has ${bytes} bytes, over ${MAX_BYTES} + one line`);
        assert.ok(!text.includes(PASSWORD), `${name} holds the Redis password`);
        // The current file may be read halfway through a write: its last line is not checked.
        const whole = name === `${APP}.log` ? text.slice(0, text.lastIndexOf('\n') + 1) : text;
        assert.doesNotThrow(() => entries(whole), `${name} has a line that is not JSON`);
        const rotated = name !== `${APP}.log`;
        if (full && rotated) assert.ok(bytes > MAX_BYTES - longestLine, `${name} has only ${bytes} bytes`);
      }
      const oldest = files.get(`${APP}.log.${RETAIN}`);
      if (oldest) generations.add(oldest.slice(0, oldest.indexOf('\n')));
      return generations.size >= 3;
    },
    { timeoutMs: 30_000, message: `the oldest kept file was not replaced 3 times (${generations.size})` },
  );
  assert.equal(mostFiles, RETAIN + 1);
  // The newest file still gets lines: one written after now.
  const now = new Date().toISOString();
  const current = () => entries(logFiles(logDir).get(`${APP}.log`) ?? '');
  const written = () => current().some((e) => e.msg === 'relay stats' && e.time > now);
  await waitFor(written, { message: 'no new line in the current file' });
}

describe('log rotation under pm2 (OUTBOX_LOG_MAX_SIZE, OUTBOX_LOG_RETAIN)', () => {
  let pm2: Pm2;
  let logDir: string;

  before(async () => {
    ({ pm2, logDir } = await relayUnderPm2());
  });

  after(async () => {
    await pm2?.kill();
  });

  it('keeps at most retain + 1 files of at most the max size, the newest written, no password in any', async () => {
    await assertBoundedWhileRotating(logDir, { full: true });
  });

  it('pm2 logs prints the current file\'s newest lines and follows new ones, a restart\'s first too', async () => {
    const pm2Env = { ...process.env, PM2_HOME: pm2.home, PM2_DISABLE_VERSION_CHECK: '1' };
    // pm2 opened its out file before the app's first rotation: it must show the file at that path now.
    await waitFor(() => logFiles(logDir).has(`${APP}.log.${RETAIN}`), { message: 'the log was not rotated' });
    const now = new Date().toISOString();
    await waitFor(() => entries(logFiles(logDir).get(`${APP}.log`) ?? '').some((e) => e.time > now));
    const shown = spawnSync(process.execPath, [PM2_BIN, 'logs', APP, '--raw', '--nostream', '--lines', '5'], {
      cwd: REPO_ROOT,
      env: pm2Env,
      encoding: 'utf8',
    });
    assert.equal(shown.status, 0, shown.stderr);
    const tail = entries(shown.stdout);
    assert.ok(tail.length >= 1 && tail.every((e) => e.app === APP), shown.stdout);
    assert.ok(tail.some((e) => e.time > now), `pm2 logs showed no line newer than ${now}:\n${shown.stdout}`);

    // The app writes its lines to the file, not stdout: pm2 logs follows them all the same.
    let followed = '';
    const follower = spawn(process.execPath, [PM2_BIN, 'logs', APP, '--lines', '0'], {
      cwd: REPO_ROOT,
      env: pm2Env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    follower.stdout!.on('data', (chunk) => (followed += chunk));
    try {
      const followedFrom = new Date().toISOString();
      const newStats = () => entries(followed).some((e) => e.msg === 'relay stats' && e.time > followedFrom);
      await waitFor(newStats, {
        message: `pm2 logs did not follow the new lines:\n${followed.slice(-2000)}`,
      });
      const restartedAt = new Date().toISOString();
      assert.equal((await pm2.run('restart', APP)).code, 0);
      const restarted = () => entries(followed).find((e) => e.msg === 'relay started' && e.time > restartedAt);
      const started = await waitFor(restarted, {
        message: "pm2 logs did not show the restarted relay's first line",
      });
      assert.match(String(started.redis), /:\*\*\*@127\.0\.0\.1/);
      assert.ok(!followed.includes(PASSWORD), 'pm2 logs showed the Redis password');
    } finally {
      follower.kill('SIGTERM');
    }
  });

  it('refuses a max size without a unit or under 1KB and a retain out of 0-1000; --help lists them', () => {
    const run = (env: Record<string, string>, args: string[] = []) =>
      spawnSync(process.execPath, [join(REPO_ROOT, 'dist/apps/relay/main.js'), ...args], {
        env: { ...process.env, OUTBOX_DIR: tempDir(), OUTBOX_RELAY_HEALTH_PORT: 'off', ...env },
        encoding: 'utf8',
        // A relay that took the setting would wait for app.db for ever.
        timeout: 10_000,
      });
    const unitless = /^OUTBOX_LOG_MAX_SIZE must be a size with a unit .* from 1KB to 1TB, e\.g\. 10MB, got "10"$/;
    for (const [env, message] of [
      [{ OUTBOX_LOG_MAX_SIZE: '10' }, unitless],
      [{ OUTBOX_LOG_MAX_SIZE: '512B' }, /^OUTBOX_LOG_MAX_SIZE must be a size .* got "512B"$/],
      [{ OUTBOX_LOG_RETAIN: '1001' }, /^OUTBOX_LOG_RETAIN must be a whole number from 0 to 1000, got "1001"$/],
    ] as const) {
      const refused = run(env);
      assert.equal(refused.status, 78, refused.stdout + refused.stderr);
      assert.match(JSON.parse(refused.stdout).msg, message);
    }
    const help = run({}, ['--help']).stdout;
    assert.match(help, /--log-max-size .*\[env OUTBOX_LOG_MAX_SIZE, default 10MB\]/);
    assert.match(help, /--log-retain .*\[env OUTBOX_LOG_RETAIN, default 5\]/);
  });
});

describe('log rotation with two relay instances writing the same file (OUTBOX_RELAY_INSTANCES=2)', () => {
  it('stays within the same bounds, every line whole: each instance follows the other\'s rotations', async () => {
    const { pm2, logDir } = await relayUnderPm2({ OUTBOX_RELAY_INSTANCES: '2' });
    try {
      const online = async () => (await pm2.list()).filter((p) => p.name === APP && p.pm2_env.status === 'online');
      await waitFor(async () => (await online()).length === 2);
      // Two that rotate at the same instant may leave a short rotated file: not checked for fullness here.
      await assertBoundedWhileRotating(logDir, { full: false });
    } finally {
      await pm2.kill();
    }
  });
});
