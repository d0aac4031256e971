import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './redis-server.js';
import { pingReply } from './managed-redis.js';
import { waitFor } from './wait-for.js';

const run = promisify(execFile);

export interface RedisCluster {
  /** `127.0.0.1:<port>` of each master. */
  nodes: string[];
  /** SIGKILLs master `i` and starts it again on its port and config, with every write it acknowledged; `wipe` deletes its AOF/RDB first (its slots stay). */
  restart(i: number, options?: { wipe?: boolean }): Promise<void>;
  /** SIGKILLs master `i` (it stays down until `restart`). */
  kill(i: number): Promise<void>;
  stop(): Promise<void>;
}

async function clusterState(port: number): Promise<string | undefined> {
  try {
    const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'cluster', 'info'], { timeout: 2000 });
    return /cluster_state:(\w+)/.exec(stdout)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * A private Redis Cluster of three masters (no replicas) on free ports, AOF on, in one temp dir:
 * each node's `nodes-<port>.conf` and its own data dir. Resolves once every node reports
 * cluster_state:ok. Killed and deleted by `stop`, or when the test process exits.
 *
 * The AOF is fsynced before each reply (`appendfsync always`, as `outbox chaos` runs its one Redis),
 * so a master SIGKILLed and started again by `restart` comes back with every write it acknowledged.
 * With Redis's default, `everysec`, it need not: while a background fsync is still under way (a
 * busy disk), Redis keeps new writes in memory, not even written to the file, for up to 2 s, and
 * answers them all the same. A relay marks rows PUBLISHED on that answer, so a restart there lost
 * pushed events for good, their aggregates' later events parked behind them (a scale-out chaos run
 * on a loaded machine: 10 events pushed within 225 ms before a master's SIGKILL, gone after it).
 */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const root = mkdtempSync(join(tmpdir(), 'outbox-cluster-'));
  const ports: number[] = [];
  for (let i = 0; i < masters; i += 1) {
    let port = await freePort();
    // The cluster bus listens on port + 10000: both must be free.
    while (port > 55_535 || ports.includes(port)) port = await freePort();
    ports.push(port);
  }
  const children: (ChildProcess | undefined)[] = [];
  const killAll = () => children.forEach((child) => child?.kill('SIGKILL'));
  process.once('exit', killAll);

  const dataDir = (i: number) => join(root, `node-${ports[i]}`);
  async function start(i: number): Promise<void> {
    const port = ports[i];
    const child = spawn(
      'redis-server',
      [
        '--port', String(port),
        '--bind', '127.0.0.1',
        '--cluster-enabled', 'yes',
        '--cluster-config-file', join(root, `nodes-${port}.conf`),
        '--cluster-require-full-coverage', 'no',
        '--cluster-node-timeout', '2000',
        '--appendonly', 'yes',
        '--appendfsync', 'always',
        '--save', '',
        '--dir', root,
        '--appenddirname', `node-${port}`,
        '--dbfilename', `dump-${port}.rdb`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children[i] = child;
    let output = '';
    child.stdout!.on('data', (chunk) => (output = (output + chunk).slice(-2000)));
    child.stderr!.on('data', (chunk) => (output = (output + chunk).slice(-2000)));
    let failure: Error | undefined;
    child.once('error', (error) => (failure = error));
    child.once('exit', (code) => (failure ??= new Error(`redis-server ${port} exited with ${code}: ${output.trim().split('\n').pop()}`)));
    await waitFor(
      async () => {
        if (failure) throw failure;
        return (await pingReply(port, '127.0.0.1', 500))?.startsWith('+PONG') ?? false;
      },
      { message: `redis-server on port ${port} did not start` },
    );
  }
  async function kill(i: number): Promise<void> {
    const child = children[i];
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }
  async function allOk(): Promise<void> {
    await waitFor(async () => (await Promise.all(ports.map(clusterState))).every((state) => state === 'ok'), {
      timeoutMs: 20_000,
      message: `the cluster on ${ports.join(', ')} did not reach cluster_state:ok`,
    });
  }

  try {
    await Promise.all(ports.map((_, i) => start(i)));
    await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 20_000 });
    await allOk();
  } catch (error) {
    killAll();
    rmSync(root, { recursive: true, force: true });
    throw error;
  }

  return {
    nodes: ports.map((port) => `127.0.0.1:${port}`),
    kill,
    async restart(i, { wipe = false } = {}) {
      await kill(i);
      if (wipe) {
        rmSync(dataDir(i), { recursive: true, force: true });
        for (const file of readdirSync(root)) if (file === `dump-${ports[i]}.rdb`) rmSync(join(root, file));
      }
      await start(i);
      await allOk();
    },
    async stop() {
      await Promise.all(ports.map((_, i) => kill(i)));
      process.removeListener('exit', killAll);
      rmSync(root, { recursive: true, force: true });
    },
  };
}
