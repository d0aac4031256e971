import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { REPO_ROOT } from '../shared/local/pm2.js';
import { freePort, RedisServer, testClient } from '../shared/local/redis-server.js';
import { tempDir } from './helpers/stores.js';
import { waitFor } from '../shared/local/wait-for.js';

const WRAPPER = join(REPO_ROOT, 'dist', 'apps', 'redis', 'main.js');

/** Evaluates ecosystem.config.cjs as pm2 would, with exactly `env`. */
function loadEcosystem(env: Record<string, string>) {
  return spawnSync(process.execPath, ['-e', "console.log(JSON.stringify(require('./ecosystem.config.cjs').apps.map((a) => [a.name, a.env.REDIS_URL])))"], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ...env },
    encoding: 'utf8',
  });
}

function startWrapper(env: Record<string, string>) {
  const child = spawn(process.execPath, [WRAPPER], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

describe('ecosystem.config.cjs', () => {
  it('runs a managed outbox-redis only when REDIS_URL is not set', async () => {
    const port = String(await freePort());
    const managed = loadEcosystem({ OUTBOX_REDIS_PORT: port });
    assert.equal(managed.status, 0, managed.stderr);
    assert.deepEqual(JSON.parse(managed.stdout), [
      ['outbox-redis', `redis://127.0.0.1:${port}`],
      ['outbox-producer', `redis://127.0.0.1:${port}`],
      ['outbox-relay', `redis://127.0.0.1:${port}`],
      ['outbox-consumer', `redis://127.0.0.1:${port}`],
    ]);
    const external = loadEcosystem({ REDIS_URL: 'redis://127.0.0.1:1234' });
    assert.deepEqual(JSON.parse(external.stdout).map(([name]: [string]) => name), ['outbox-producer', 'outbox-relay', 'outbox-consumer']);
  });

  it('says in one line what to do when there is no Redis and no redis-server', async () => {
    const result = loadEcosystem({ OUTBOX_REDIS_PORT: String(await freePort()), PATH: '/nonexistent' });
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^outbox: no Redis on 127\.0\.0\.1:\d+ and redis-server is not installed: apt-get install redis-server, or set REDIS_URL to a running Redis\n$/);
  });
});

describe('outbox-redis (the managed Redis app)', () => {
  const servers: RedisServer[] = [];
  after(async () => {
    for (const server of servers) await server.destroy();
  });

  it('starts redis-server with an append-only file (fsync every second) in the data dir, never evicting, and stops it on SIGTERM', async () => {
    const dir = tempDir();
    const port = await freePort();
    const wrapper = startWrapper({ OUTBOX_DIR: dir, OUTBOX_REDIS_PORT: String(port) });
    const client = testClient(`redis://127.0.0.1:${port}`);
    try {
      await waitFor(() => client.ping().then((pong) => pong === 'PONG').catch(() => false));
      assert.deepEqual(await client.config('GET', 'appendonly'), ['appendonly', 'yes']);
      assert.deepEqual(await client.config('GET', 'appendfsync'), ['appendfsync', 'everysec']);
      assert.deepEqual(await client.config('GET', 'maxmemory-policy'), ['maxmemory-policy', 'noeviction']);
      assert.deepEqual(await client.config('GET', 'dir'), ['dir', join(dir, 'redis')]);
      assert.match(wrapper.output(), /"msg":"redis-server started"/);
    } finally {
      client.disconnect();
      wrapper.child.kill('SIGTERM');
    }
    assert.equal(await wrapper.exited, 0);
    assert.ok(existsSync(join(dir, 'redis')));
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
});
