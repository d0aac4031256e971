import { Redis } from 'ioredis';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pingReply } from './managed-redis.js';
import { waitFor } from './wait-for.js';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function ping(port: number): Promise<boolean> {
  return (await pingReply(port, '127.0.0.1', 500))?.startsWith('+PONG') ?? false;
}

/** A private redis-server on a free port (tests, `outbox chaos`), which may be stopped and started again. */
export class RedisServer {
  private process?: ChildProcess;

  private constructor(
    readonly port: number,
    readonly dataDir: string,
    private readonly extraArgs: string[],
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(extraArgs: string[] = [], dataDir = mkdtempSync(join(tmpdir(), 'outbox-redis-'))): Promise<RedisServer> {
    const server = new RedisServer(await freePort(), dataDir, extraArgs);
    await server.resume();
    return server;
  }

  /** Starts the server again on the same port (and, with appendonly, the same data). */
  async resume(): Promise<void> {
    mkdirSync(this.dataDir, { recursive: true });
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', this.dataDir];
    const child = spawn('redis-server', [...args, ...this.extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.process = child;
    let output = '';
    child.stdout!.on('data', (chunk) => (output = (output + chunk).slice(-2000)));
    child.stderr!.on('data', (chunk) => (output = (output + chunk).slice(-2000)));
    let failure: Error | undefined;
    child.once('error', (error) => (failure = error));
    child.once('exit', (code) => (failure ??= new Error(`redis-server exited with ${code} while starting: ${output.trim().split('\n').pop()}`)));
    await waitFor(
      () => {
        if (failure) throw failure;
        return ping(this.port);
      },
      { message: `redis-server on port ${this.port} did not start` },
    );
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
  }

  /**
   * Redis losing its state: the server is killed, its files (AOF directory, RDB) are deleted and it
   * starts again on the same port with nothing.
   */
  async wipe(): Promise<void> {
    await this.stop('SIGKILL');
    rmSync(this.dataDir, { recursive: true, force: true });
    await this.resume();
  }

  async destroy(): Promise<void> {
    await this.stop('SIGKILL');
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** A plain client that stays quiet (and reconnects) while the server is stopped. */
export function testClient(url: string): Redis {
  const client = new Redis(url);
  client.on('error', () => {});
  return client;
}
