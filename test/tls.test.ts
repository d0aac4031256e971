import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { REPO_ROOT } from '../shared/tooling/local/pm2.js';
import { freePort, RedisServer } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { runCli, type CliEnv } from './helpers/cli.js';
import { count, tempDir } from './helpers/stores.js';

const PASSWORD = 'tls-s3cret';
let server: RedisServer;
let plain: Redis;
let certs: string;
let tlsUrl: string;

/** A throwaway CA and a server certificate for 127.0.0.1, made with openssl. */
function makeCertificates(dir: string): void {
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=outbox test CA');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '1', '-extfile', 'ext.cnf');
}

before(async () => {
  certs = tempDir();
  makeCertificates(certs);
  const tlsPort = await freePort();
  server = await RedisServer.start([
    '--tls-port', String(tlsPort),
    '--tls-cert-file', join(certs, 'server.pem'),
    '--tls-key-file', join(certs, 'server.key'),
    '--tls-ca-cert-file', join(certs, 'ca.pem'),
    '--tls-auth-clients', 'no',
  ]);
  plain = new Redis(server.url);
  await plain.config('SET', 'requirepass', PASSWORD);
  tlsUrl = `rediss://:${PASSWORD}@127.0.0.1:${tlsPort}`;
});
after(async () => {
  plain?.disconnect();
  await server?.destroy();
});

function tlsEnv(dir: string, extra: Record<string, string> = {}): CliEnv {
  return { dir, redisUrl: tlsUrl, env: { NODE_EXTRA_CA_CERTS: join(certs, 'ca.pem'), ...extra } };
}

describe('Redis over TLS with a password', () => {
  it('the CLI relays and consumes over rediss://', async () => {
    const dir = tempDir();
    const env = tlsEnv(dir);
    for (const args of [['init'], ['place-order', '--count', '3'], ['relay'], ['consume'], ['verify']]) {
      const result = await runCli(args, env);
      assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`);
      assert.doesNotMatch(result.stdout + result.stderr, new RegExp(PASSWORD));
    }
    assert.equal(await plain.hlen('processed'), 3);
    await plain.flushall();
  });

  it('the relay app runs over rediss:// and never prints the password', async () => {
    const dir = tempDir();
    assert.equal((await runCli(['init'], tlsEnv(dir))).code, 0);
    assert.equal((await runCli(['place-order', '--count', '2'], tlsEnv(dir))).code, 0);
    const relay = spawn(process.execPath, [join(REPO_ROOT, 'dist/apps/relay/main.js'), '--every', '300ms', '--slice', '300ms'], {
      env: { ...process.env, OUTBOX_DIR: dir, REDIS_URL: tlsUrl, NODE_EXTRA_CA_CERTS: join(certs, 'ca.pem') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    relay.stdout.on('data', (chunk) => (output += chunk));
    relay.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => relay.on('exit', resolve));
    try {
      await waitFor(() => count(dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { timeoutMs: 15_000, message: 'not relayed over TLS' });
    } finally {
      relay.kill('SIGTERM');
      await exited;
    }
    assert.match(output, /"redis":"rediss:\/\/:\*\*\*@127\.0\.0\.1:\d+"/);
    assert.doesNotMatch(output, new RegExp(PASSWORD));
    await plain.flushall();
  });

  it('a wrong password or an untrusted certificate is one line, with the password redacted', async () => {
    const dir = tempDir();
    assert.equal((await runCli(['init'], tlsEnv(dir))).code, 0);
    const wrong = await runCli(['relay'], { ...tlsEnv(dir), redisUrl: tlsUrl.replace(PASSWORD, 'nope') });
    assert.equal(wrong.code, 5);
    assert.match(wrong.stderr, /^outbox: cannot connect to Redis at rediss:\/\/:\*\*\*@127\.0\.0\.1:\d+ \(.*(WRONGPASS|invalid).*\): check the user and password in --redis \/ REDIS_URL$/m);
    const untrusted = await runCli(['relay'], { dir, redisUrl: tlsUrl });
    assert.equal(untrusted.code, 5);
    assert.match(untrusted.stderr, /^outbox: cannot connect to Redis at rediss:\/\/:\*\*\*@127\.0\.0\.1:\d+ \(.*(certificate|CERT).*\): let Node trust the server's CA: NODE_EXTRA_CA_CERTS=/m);
    for (const result of [wrong, untrusted]) {
      assert.equal(result.stderr.trim().split('\n').length, 1);
      assert.doesNotMatch(result.stderr, new RegExp(PASSWORD));
    }
  });
});
