import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { redisAnswers as redisAnswersOn } from '../shared/tooling/local/managed-redis.js';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { freePort, RedisServer, testClient } from '../shared/tooling/local/redis-server.js';
import { startApp, stopApp } from './helpers/apps.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/stores.js';
import { lastAckedMessage, reachableHere, writeWhileSyncing } from './helpers/aof.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';

const WRAPPER = join(REPO_ROOT, 'dist', 'apps', 'redis', 'main.js');
const RECORD_CMDLINE = fileURLToPath(new URL('./fixtures/record-cmdline.js', import.meta.url));

/** The environment without REDIS_URL: the default URL, i.e. the managed Redis on OUTBOX_REDIS_PORT. */
function withoutRedisUrl(env: Record<string, string>): NodeJS.ProcessEnv {
  const { REDIS_URL: _, ...rest } = process.env;
  return { ...rest, ...env };
}

/** Evaluates ecosystem.config.cjs as pm2 would, with exactly `env`. */
function loadEcosystem(env: Record<string, string>) {
  return spawnSync(
    process.execPath,
    ['-e', "console.log(JSON.stringify(require('./ecosystem.config.cjs').apps.map((a) => [a.name, a.env.REDIS_URL ?? null, a.env.OUTBOX_REDIS_PORT ?? null])))"],
    { cwd: REPO_ROOT, env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ...env }, encoding: 'utf8' },
  );
}

function startWrapper(env: Record<string, string>) {
  const child = spawn(process.execPath, [WRAPPER], { env: withoutRedisUrl(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

function mode(path: string): string {
  return (statSync(path).mode & 0o777).toString(8).padStart(4, '0');
}

/** Every file and directory under `dir` (itself included) with its mode, e.g. `{ 'redis/password': '0600' }`. */
function modesUnder(dir: string, prefix = '.'): Record<string, string> {
  const modes: Record<string, string> = { [prefix]: mode(dir) };
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const name = prefix === '.' ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory()) Object.assign(modes, modesUnder(path, name));
    else modes[name] = mode(path);
  }
  return modes;
}

/** Asserts that every entry is 0700 (directories) or 0600 (files). */
function assertPrivate(modes: Record<string, string>, dir: string): void {
  for (const [name, m] of Object.entries(modes)) {
    const expected = statSync(join(dir, name)).isDirectory() ? '0700' : '0600';
    assert.equal(m, expected, `${name} is ${m}, not ${expected}`);
  }
}

const password = (dir: string) => readFileSync(join(dir, 'redis', 'password'), 'utf8').trim();
const managedUrl = (dir: string, port: number) => `redis://:${password(dir)}@127.0.0.1:${port}`;
const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
const pidOf = (dir: string) => Number(readFileSync(join(dir, 'redis', 'redis.pid'), 'utf8'));

async function assertNoAuth(port: number): Promise<void> {
  const anonymous = testClient(`redis://127.0.0.1:${port}`);
  try {
    await assert.rejects(anonymous.ping(), /NOAUTH/);
  } finally {
    anonymous.disconnect();
  }
}

describe('ecosystem.config.cjs', () => {
  it('runs a managed outbox-redis only when REDIS_URL is not set, makes its password (0600, dir 0700) before any app starts, and gives no app a REDIS_URL', async () => {
    const port = String(await freePort());
    const dir = join(tempDir(), 'data');
    const managed = loadEcosystem({ OUTBOX_REDIS_PORT: port, OUTBOX_DIR: dir });
    assert.equal(managed.status, 0, managed.stderr);
    assert.deepEqual(JSON.parse(managed.stdout), [
      ['outbox-redis', null, port],
      ['outbox-relay', null, port],
      ['outbox-consumer', null, port],
      ['outbox-producer', null, port],
      ['outbox-dashboard', null, port],
    ]);
    assert.match(password(dir), /^[0-9a-f]{64}$/);
    assert.equal(mode(join(dir, 'redis', 'password')), '0600');
    assert.equal(mode(join(dir, 'redis')), '0700');
    const external = loadEcosystem({ REDIS_URL: 'redis://127.0.0.1:1234', OUTBOX_DIR: tempDir() });
    assert.deepEqual(JSON.parse(external.stdout), [
      ['outbox-relay', 'redis://127.0.0.1:1234', null],
      ['outbox-consumer', 'redis://127.0.0.1:1234', null],
      ['outbox-producer', 'redis://127.0.0.1:1234', null],
      ['outbox-dashboard', 'redis://127.0.0.1:1234', null],
    ]);
  });

  it('makes the log dir (OUTBOX_LOG_DIR) 0700 before pm2 writes its 0644 log files there, and has pm2 signal outbox-redis alone (treekill off)', async () => {
    const logDir = join(tempDir(), 'logs', 'outbox');
    const env = { OUTBOX_REDIS_PORT: String(await freePort()), OUTBOX_DIR: join(tempDir(), 'data'), OUTBOX_LOG_DIR: logDir };
    const result = spawnSync(process.execPath, ['-e', "console.log(JSON.stringify(require('./ecosystem.config.cjs').apps.map((a) => [a.name, a.treekill ?? null, a.out_file])))"], {
      cwd: REPO_ROOT,
      env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ...env },
      encoding: 'utf8',
    });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(mode(logDir), '0700');
    const apps = JSON.parse(result.stdout) as [string, boolean | null, string][];
    assert.deepEqual(
      apps.map(([name, treekill, outFile]) => [name, treekill, outFile]),
      ['outbox-redis', 'outbox-relay', 'outbox-consumer', 'outbox-producer', 'outbox-dashboard'].map((name) => [name, name === 'outbox-redis' ? false : null, join(logDir, `${name}.log`)]),
    );
  });

  it('says in one line what to do when there is no Redis and no redis-server', async () => {
    const result = loadEcosystem({ OUTBOX_REDIS_PORT: String(await freePort()), OUTBOX_DIR: tempDir(), PATH: '/nonexistent' });
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^outbox: no Redis on 127\.0\.0\.1:\d+ and redis-server is not installed: apt-get install redis-server, or set REDIS_URL to a running Redis\n$/);
  });

  it('on a second "pm2 start", names the apps already running and says to delete them first for new settings', async () => {
    const dir = tempDir();
    const relayStandIn = spawn('sleep', ['60']);
    try {
      mkdirSync(join(dir, 'attached'), { recursive: true });
      writeFileSync(join(dir, 'attached', `outbox-relay.${relayStandIn.pid}.json`), '{}');
      const env = { PATH: process.env.PATH!, HOME: process.env.HOME!, OUTBOX_DIR: dir, REDIS_URL: 'redis://127.0.0.1:1' };
      // As pm2 evaluates the file: in its own process, whose arguments name the action.
      const load = (action: string) =>
        spawnSync(process.execPath, ['-e', "require('./ecosystem.config.cjs')", action, 'ecosystem.config.cjs'], { cwd: REPO_ROOT, env, encoding: 'utf8' });
      const started = load('start');
      assert.equal(started.status, 0, started.stderr);
      assert.equal(
        started.stderr,
        `outbox: outbox-relay (pid ${relayStandIn.pid}) already running: pm2 starts only the apps that are not, and the running ones keep the settings they were started with; ` +
          "to start them with this shell's settings: npx pm2 delete ecosystem.config.cjs, then npx pm2 start ecosystem.config.cjs\n",
      );
      assert.equal(load('delete').stderr, '');
    } finally {
      relayStandIn.kill();
    }
  });

  it('refuses an OUTBOX_REDIS_PORT that is not a port, in one line', () => {
    const result = loadEcosystem({ OUTBOX_REDIS_PORT: '63a', OUTBOX_DIR: tempDir() });
    assert.notEqual(result.status, 0);
    assert.equal(result.stderr, 'outbox: OUTBOX_REDIS_PORT must be a port number from 1 to 65535, got "63a"\n');
  });
});

describe('outbox-redis (the managed Redis app)', () => {
  const servers: RedisServer[] = [];
  after(async () => {
    for (const server of servers) await server.destroy();
  });

  it('starts redis-server with a password, an append-only file (fsynced before each answer) in the data dir, never evicting, and stops it on SIGTERM after a grace for the other apps', async () => {
    const dir = tempDir();
    const port = await freePort();
    const wrapper = startWrapper({ OUTBOX_DIR: dir, OUTBOX_REDIS_PORT: String(port) });
    try {
      await waitFor(() => /"msg":"redis-server started"/.test(wrapper.output()) && existsSync(join(dir, 'redis', 'redis.pid')));
      const client = testClient(managedUrl(dir, port));
      try {
        await waitFor(() => client.ping().then((pong) => pong === 'PONG').catch(() => false));
        assert.deepEqual(await client.config('GET', 'appendonly'), ['appendonly', 'yes']);
        assert.deepEqual(await client.config('GET', 'appendfsync'), ['appendfsync', 'always']);
        assert.deepEqual(await client.config('GET', 'maxmemory-policy'), ['maxmemory-policy', 'noeviction']);
        assert.deepEqual(await client.config('GET', 'dir'), ['dir', join(dir, 'redis')]);
        await client.set('written', '1');
      } finally {
        client.disconnect();
      }
      await assertNoAuth(port);
      assert.doesNotMatch(cmdline(pidOf(dir)), new RegExp(password(dir)));
      assert.doesNotMatch(wrapper.output(), new RegExp(password(dir)));
      const modes = modesUnder(join(dir, 'redis'));
      assert.ok(modes['appendonlydir'] && modes.password, JSON.stringify(modes));
      assertPrivate(modes, join(dir, 'redis'));
    } finally {
      wrapper.child.kill('SIGTERM');
    }
    // pm2 stops every app at once: Redis stays up for the relay and the consumer to close with it.
    const signalledAt = Date.now();
    await waitFor(() => /"msg":"stopping redis-server in 1\.5 s: the other apps close first"/.test(wrapper.output()), { message: wrapper.output() });
    const client = testClient(managedUrl(dir, port));
    try {
      assert.equal(await client.get('written'), '1', 'Redis went down at the signal');
    } finally {
      client.disconnect();
    }
    assert.equal(await wrapper.exited, 0, wrapper.output());
    const stoppedAfter = Date.now() - signalledAt;
    assert.ok(stoppedAfter >= 1400 && stoppedAfter < 4500, `stopped ${stoppedAfter} ms after the signal: not within pm2's kill_timeout of 5 s, or without the grace`);
    assert.match(wrapper.output(), /"msg":"redis-server exited"/);
    assert.ok(existsSync(join(dir, 'redis')));
  });

  it('SIGKILLed and started again, it has every write it acknowledged, even one answered while its disk was still syncing an earlier write', async (t) => {
    if (!(await reachableHere(t))) return;
    const dir = tempDir();
    const port = await freePort();
    const first = startWrapper({ OUTBOX_DIR: dir, OUTBOX_REDIS_PORT: String(port) });
    let second: ReturnType<typeof startWrapper> | undefined;
    try {
      await waitFor(() => /"msg":"redis-server started"/.test(first.output()) && existsSync(join(dir, 'redis', 'redis.pid')), { message: first.output() });
      const client = testClient(managedUrl(dir, port));
      let written = { acked: 0, answeredUnwritten: false };
      try {
        await waitFor(() => client.ping().then((pong) => pong === 'PONG').catch(() => false));
        // The SIGKILL lands where an everysec Redis holds a write it answered but has not written.
        written = await writeWhileSyncing(client, client);
        process.kill(pidOf(dir), 'SIGKILL');
      } finally {
        client.disconnect();
      }
      await first.exited;
      second = startWrapper({ OUTBOX_DIR: dir, OUTBOX_REDIS_PORT: String(port) });
      await waitFor(() => /"msg":"redis-server started"/.test(second!.output()), { message: second.output() });
      const again = testClient(managedUrl(dir, port));
      try {
        await waitFor(() => again.ping().then((pong) => pong === 'PONG').catch(() => false));
        assert.equal(Number(await again.get('acked')), written.acked, lastAckedMessage(written.answeredUnwritten));
      } finally {
        again.disconnect();
      }
    } finally {
      first.child.kill('SIGTERM');
      second?.child.kill('SIGTERM');
      await second?.exited;
    }
  });

  it('leaves a Redis that already listens on the port alone, and stops with 0 on a SIGTERM sent the instant it says so', async () => {
    const existing = await RedisServer.start();
    servers.push(existing);
    const wrapper = startWrapper({ OUTBOX_DIR: tempDir(), OUTBOX_REDIS_PORT: String(existing.port) });
    // Signalled from the output handler itself, not after a poll: the SIGTERM reaches the process as
    // early as pm2's could, right after the line.
    wrapper.child.stdout.on('data', () => {
      if (/already listens on 127\.0\.0\.1:\d+: the apps use it/.test(wrapper.output())) wrapper.child.kill('SIGTERM');
    });
    assert.equal(await wrapper.exited, 0, wrapper.output());
    const client = testClient(existing.url);
    assert.equal(await client.ping(), 'PONG');
    client.disconnect();
  });

  it('the apps find its password in the data dir: the relay connects with the default URL, and app.db, -wal and -shm are 0600', async () => {
    const dir = tempDir();
    const port = await freePort();
    const env = { OUTBOX_DIR: dir, OUTBOX_REDIS_PORT: String(port) };
    const wrapper = startWrapper(env);
    const relay = startApp({ dir, redisUrl: '' }, 'dist/apps/relay/main.js', [], env);
    try {
      assert.equal((await runCli(['init'], { dir, redisUrl: '', env })).code, 0);
      await waitFor(() => /"msg":"relay started"/.test(relay.output()), { timeoutMs: 20_000, message: `the relay did not start: ${relay.output()}` });
      await waitFor(() => existsSync(join(dir, 'app.db-wal')) && existsSync(join(dir, 'app.db-shm')));
      for (const file of ['app.db', 'app.db-wal', 'app.db-shm']) assert.equal(mode(join(dir, file)), '0600', file);
      assert.doesNotMatch(relay.output(), new RegExp(password(dir)));
      assert.match(relay.output(), /redis:\/\/:\*\*\*@127\.0\.0\.1/);
    } finally {
      await stopApp(relay);
      wrapper.child.kill('SIGTERM');
    }
    assert.equal(await wrapper.exited, 0);
  });
});

describe('the CLI with the default Redis URL', () => {
  it('starts the managed Redis when nothing listens (one line on stderr), passes no password on any command line, keeps every file private, and "outbox redis stop" stops it', async () => {
    const dir = join(tempDir(), 'data');
    const port = await freePort();
    const log = join(tempDir(), 'cmdlines');
    const env = {
      OUTBOX_REDIS_PORT: String(port),
      NODE_OPTIONS: `--import ${RECORD_CMDLINE}`,
      OUTBOX_TEST_CMDLINE_LOG: log,
    };
    const stop = () => runCli(['redis', 'stop', '--dir', dir], { dir: '', redisUrl: '', env });
    try {
      const lab = await runCli(['lab', '--dir', dir], { dir: '', redisUrl: '', env });
      assert.equal(lab.code, 0, lab.stdout + lab.stderr);
      assert.equal(
        lab.stderr.split('\n')[0],
        `outbox: started redis-server on 127.0.0.1:${port} (data in ${dir}/redis); stop it with "outbox redis stop --dir ${dir}"`,
      );
      await assertNoAuth(port);
      const secret = password(dir);
      // The lab's relay-crash child got the URL with the password, through its environment only.
      const cmdlines = readFileSync(log, 'utf8');
      assert.match(cmdlines, /main\.js relay-crash/);
      assert.ok(!cmdlines.includes(secret), cmdlines);
      assert.ok(!cmdline(pidOf(dir)).includes(secret));
      assert.ok(!lab.stdout.includes(secret));
      const modes = modesUnder(dir);
      for (const name of ['.', 'app.db', 'report.txt', 'redis', 'redis/password', 'redis/appendonlydir']) assert.ok(modes[name], `${name} missing: ${JSON.stringify(modes)}`);
      assertPrivate(modes, dir);

      // It is running now: the next command uses it, with the password, and starts nothing.
      const report = await runCli(['report', '--dir', dir], { dir: '', redisUrl: '', env });
      assert.equal(report.code, 0, report.stderr);
      assert.equal(report.stderr, '');
      const status = await runCli(['redis', 'status', '--dir', dir], { dir: '', redisUrl: '', env });
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, new RegExp(`^redis-server runs on 127\\.0\\.0\\.1:${port} \\(pid ${pidOf(dir)}, started by outbox;`));
    } finally {
      const stopped = await stop();
      assert.equal(stopped.code, 0, stopped.stderr);
      assert.match(stopped.stdout, new RegExp(`^stopped redis-server on 127\\.0\\.0\\.1:${port} \\(pid \\d+\\); its data stays in ${dir}/redis\\n$`));
    }
    assert.equal(existsSync(join(dir, 'redis', 'redis.pid')), false);
    const client = testClient(`redis://127.0.0.1:${port}`);
    client.options.maxRetriesPerRequest = 0;
    client.options.retryStrategy = () => null;
    await assert.rejects(client.ping());
    client.disconnect();
    const status = await runCli(['redis', 'status', '--dir', dir], { dir: '', redisUrl: '', env });
    assert.equal(status.code, 3);
    assert.equal(status.stdout, `no redis-server started by outbox runs on 127.0.0.1:${port}\n`);
    const again = await stop();
    assert.equal(again.code, 0);
    assert.equal(again.stdout, `no redis-server started by outbox runs on 127.0.0.1:${port}: nothing to stop\n`);
    // Its data stayed: started again, it has the lab's keys.
    const restarted = await runCli(['redis', 'start', '--dir', dir], { dir: '', redisUrl: '', env });
    try {
      assert.equal(restarted.code, 0, restarted.stderr);
      const managed = testClient(managedUrl(dir, port));
      assert.ok((await managed.dbsize()) > 0);
      managed.disconnect();
    } finally {
      await stop();
    }
  });

  it('a command with another data dir uses the managed Redis that holds the port (its password), and "outbox redis stop" from there stops it, unless a relay uses it', async () => {
    const first = join(tempDir(), 'first');
    const second = join(tempDir(), 'second');
    const port = await freePort();
    const env = { OUTBOX_REDIS_PORT: String(port) };
    const cli = (dir: string, ...args: string[]) => runCli([...args, '--dir', dir], { dir: '', redisUrl: '', env });
    const relayStandIn = spawn('sleep', ['60']);
    try {
      const lab = await cli(first, 'lab');
      assert.equal(lab.code, 0, lab.stdout + lab.stderr);
      // As the command examples of the README and docs/ do after the lab (test/readme.test.ts): a data dir of their own, the same Redis.
      for (const args of [['init'], ['init', '--force'], ['place-order'], ['relay'], ['consume'], ['verify']]) {
        const result = await cli(second, ...args);
        assert.equal(result.code, 0, `${args.join(' ')}: ${result.stdout}${result.stderr}`);
        assert.doesNotMatch(result.stderr, /NOAUTH|started redis-server/);
      }
      assert.equal(existsSync(join(second, 'redis', 'password')), false, 'no second password: one Redis on the port');
      const status = await cli(second, 'redis', 'status');
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, new RegExp(`\\(started for the data dir ${first}\\)\\n$`));

      // A relay registered on the Redis's data dir keeps it running.
      mkdirSync(join(first, 'attached'), { recursive: true });
      writeFileSync(join(first, 'attached', `outbox-relay.${relayStandIn.pid}.json`), '{}');
      const refused = await cli(second, 'redis', 'stop');
      assert.equal(refused.code, 4, refused.stdout + refused.stderr);
      assert.equal(refused.stderr, `outbox: outbox-relay (pid ${relayStandIn.pid}) uses this Redis: stop the apps first ("npx pm2 stop ecosystem.config.cjs"), or pass --ignore-attached\n`);
      assert.equal(await redisAnswersOn(port), true);

      const stopped = await cli(second, 'redis', 'stop', '--ignore-attached');
      assert.equal(stopped.code, 0, stopped.stderr);
      assert.match(stopped.stdout, new RegExp(`^stopped redis-server on 127\\.0\\.0\\.1:${port} \\(pid \\d+\\); its data stays in ${first}/redis \\(started for the data dir ${first}\\)\\n$`));
      assert.equal(await redisAnswersOn(port), false);
    } finally {
      relayStandIn.kill();
      await cli(first, 'redis', 'stop', '--ignore-attached');
    }
  });

  it('leaves a Redis it did not start alone: says so in one line, runs its own on the next free port, which the data dir, the next commands and the ecosystem file keep', async () => {
    const existing = await RedisServer.start();
    const dir = join(tempDir(), 'data');
    const env = { OUTBOX_REDIS_PORT: String(existing.port) };
    const cli = (...args: string[]) => runCli([...args, '--dir', dir], { dir: '', redisUrl: '', env });
    try {
      const lab = await cli('lab');
      assert.equal(lab.code, 0, lab.stdout + lab.stderr);
      const line = lab.stderr.split('\n').find((l) => l.startsWith('outbox: '));
      const port = Number(/started redis-server on 127\.0\.0\.1:(\d+) /.exec(line ?? '')?.[1]);
      assert.ok(port > existing.port, lab.stderr);
      assert.equal(
        line,
        `outbox: a Redis outbox did not start listens on 127.0.0.1:${existing.port}: left alone; started redis-server on 127.0.0.1:${port} (data in ${dir}/redis); stop it with "outbox redis stop --dir ${dir}"`,
      );
      assert.equal(lab.stderr.split('\n').filter((l) => l.startsWith('outbox: ')).length, 1, lab.stderr);
      // Not a key written into the Redis it did not start.
      const client = testClient(existing.url);
      assert.equal(await client.dbsize(), 0);
      client.disconnect();
      const managed = testClient(managedUrl(dir, port));
      assert.ok((await managed.dbsize()) > 0);
      managed.disconnect();
      // The next commands find it without a word; the ecosystem file gives the apps that port.
      const verify = await cli('verify');
      assert.equal(verify.code, 0, verify.stdout + verify.stderr);
      assert.equal(verify.stderr, '');
      const status = await cli('redis', 'status');
      assert.match(status.stdout, new RegExp(`^redis-server runs on 127\\.0\\.0\\.1:${port} `));
      const ecosystem = loadEcosystem({ OUTBOX_DIR: dir, ...env });
      assert.equal(ecosystem.status, 0, ecosystem.stderr);
      assert.deepEqual(JSON.parse(ecosystem.stdout)[0], ['outbox-redis', null, String(port)]);
    } finally {
      await cli('redis', 'stop');
    }
    const stop = await cli('redis', 'stop');
    assert.equal(stop.code, 0);
    assert.match(stop.stdout, new RegExp(`nothing to stop; the Redis on 127\\.0\\.0\\.1:${existing.port} is not one outbox started: left alone\\n$`));
    const client = testClient(existing.url);
    assert.equal(await client.ping(), 'PONG');
    client.disconnect();
    await existing.destroy();
  });

  it('says to apt-get install redis-server when nothing listens and redis-server is not installed (exit 5)', async () => {
    const dir = tempDir();
    const port = await freePort();
    const result = await runCli(['dead-letter', 'list', '--dir', dir], { dir: '', redisUrl: '', env: { OUTBOX_REDIS_PORT: String(port), PATH: '/nonexistent' } });
    assert.equal(result.code, 5);
    assert.equal(
      result.stderr,
      `outbox: no Redis on 127.0.0.1:${port} and redis-server is not installed: apt-get install redis-server, or point --redis / REDIS_URL at a running Redis\n`,
    );
  });

  it('refuses an OUTBOX_REDIS_PORT that is not a port (exit 2)', async () => {
    const result = await runCli(['dead-letter', 'list', '--dir', tempDir()], { dir: '', redisUrl: '', env: { OUTBOX_REDIS_PORT: '63a' } });
    assert.equal(result.code, 2);
    assert.equal(result.stderr, 'outbox: OUTBOX_REDIS_PORT must be a port number from 1 to 65535, got "63a"\n');
  });
});
