import { spawn, type ChildProcess } from 'node:child_process';
import { linkSync, lstatSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { StoreUnavailableError } from '../../outbox/errors/store-unavailable-error.js';
import { makePrivateDir, PRIVATE_UMASK, writePrivateFile } from '../../runtime/private-files.js';

/**
 * The managed Redis: the redis-server that outbox runs itself when no Redis URL is given, under pm2
 * (apps/redis/main.ts, `outbox-redis`) or started by the CLI (`ensureManagedRedis`). Both run it
 * with the same settings, from the same data dir (`<OUTBOX_DIR>/redis`, 0700) and with the same
 * generated password (`<OUTBOX_DIR>/redis/password`, 0600), which the default Redis URL carries.
 */
export const MANAGED_HOST = '127.0.0.1';
export const DEFAULT_MANAGED_PORT = 6379;

/** The managed Redis's port: env `OUTBOX_REDIS_PORT`, default 6379. */
export function managedRedisPort(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.OUTBOX_REDIS_PORT;
  if (raw === undefined || raw === '') return DEFAULT_MANAGED_PORT;
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port < 1 || port > 65535) {
    throw new InvalidInputError(`OUTBOX_REDIS_PORT must be a port number from 1 to 65535, got "${raw}"`);
  }
  return port;
}

/** Where the managed Redis keeps its append-only file, password, pid file and log. */
export function managedRedisDir(dir: string): string {
  return join(dir, 'redis');
}

function passwordPath(dir: string): string {
  return join(managedRedisDir(dir), 'password');
}

function pidPath(dir: string): string {
  return join(managedRedisDir(dir), 'redis.pid');
}

/** The managed Redis's password, or undefined before one was generated. */
export function readManagedPassword(dir: string): string | undefined {
  try {
    return readFileSync(passwordPath(dir), 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * The managed Redis's password, generated (32 random bytes, hex) and stored 0600 the first time.
 * Safe to race: the file appears whole (a link of a finished temp file) and the first one wins.
 */
export function ensureManagedPassword(dir: string): string {
  makePrivateDir(managedRedisDir(dir));
  const existing = readManagedPassword(dir);
  if (existing) return existing;
  const temp = `${passwordPath(dir)}.${process.pid}.tmp`;
  const random = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(32))).toString('hex');
  writeFileSync(temp, `${random}\n`, { mode: 0o600 });
  try {
    linkSync(temp, passwordPath(dir));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  } finally {
    rmSync(temp, { force: true });
  }
  return readManagedPassword(dir)!;
}

/**
 * While a managed Redis runs, which data dir it was started for: one file per port in a private
 * runtime dir of this user (`$XDG_RUNTIME_DIR` or the temp dir, `outbox-<uid>/`, 0700; gone with a
 * reboot, like the server). A command run with another `OUTBOX_DIR` then finds the Redis that holds
 * the port, password included, instead of failing on NOAUTH with a password it never had.
 */
function ownersDir(env: NodeJS.ProcessEnv): string {
  return join(env.XDG_RUNTIME_DIR || tmpdir(), `outbox-${process.getuid?.() ?? 'user'}`);
}

function ownerPath(port: number, env: NodeJS.ProcessEnv): string {
  return join(ownersDir(env), `redis-${port}.dir`);
}

/** Records that the managed Redis on `port` serves `dir` (written whole, then renamed). */
export function recordManagedOwner(dir: string, port: number, env: NodeJS.ProcessEnv = process.env): void {
  try {
    makePrivateDir(ownersDir(env));
    writePrivateFile(ownerPath(port, env), `${resolve(dir)}\n`);
  } catch {
    // Without the record, a command with another data dir cannot find this Redis's password: it says NOAUTH, as before.
  }
}

/** Removes the record of `port` when it names `dir` (its Redis was stopped). */
export function forgetManagedOwner(dir: string, port: number, env: NodeJS.ProcessEnv = process.env): void {
  try {
    if (readFileSync(ownerPath(port, env), 'utf8').trim() === resolve(dir)) rmSync(ownerPath(port, env), { force: true });
  } catch {
    // No record: nothing to forget.
  }
}

/**
 * The data dir whose managed Redis runs on `port`, or undefined: the record must be ours (a private
 * dir owned by this user) and name a dir whose redis-server is alive.
 */
export function managedOwnerOf(port: number, env: NodeJS.ProcessEnv = process.env): string | undefined {
  try {
    const where = lstatSync(ownersDir(env));
    if (!where.isDirectory() || (process.getuid && where.uid !== process.getuid()) || (where.mode & 0o077) !== 0) return undefined;
    const dir = readFileSync(ownerPath(port, env), 'utf8').trim();
    const running = dir === '' ? undefined : managedRedisState(dir);
    return running?.state === 'running' && (running.port === undefined || running.port === port) ? dir : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where a data dir's managed Redis moved when a Redis outbox did not start held its port (a system
 * Redis on 6379, say): `<dir>/redis/port`, `{"from":6379,"port":6380}`. The data dir keeps that
 * port from then on, so that the CLI and the apps agree on it without asking the network.
 */
function movedPath(dir: string): string {
  return join(managedRedisDir(dir), 'port');
}

/** The port this data dir's managed Redis moved to from `from`, or undefined. */
export function movedPortOf(dir: string, from: number): number | undefined {
  try {
    const moved = JSON.parse(readFileSync(movedPath(dir), 'utf8')) as { from?: unknown; port?: unknown };
    return moved.from === from && Number.isInteger(moved.port) ? (moved.port as number) : undefined;
  } catch {
    return undefined;
  }
}

/** The per-user record that the managed Redis for port `from` runs on another port (another data dir finds it there). */
function movedRecordPath(from: number, env: NodeJS.ProcessEnv): string {
  return join(ownersDir(env), `redis-${from}.moved`);
}

function recordMove(dir: string, from: number, port: number, env: NodeJS.ProcessEnv): void {
  makePrivateDir(managedRedisDir(dir));
  writePrivateFile(movedPath(dir), `${JSON.stringify({ from, port })}\n`);
  try {
    makePrivateDir(ownersDir(env));
    writePrivateFile(movedRecordPath(from, env), `${port}\n`);
  } catch {
    // Without it, another data dir starts a managed Redis of its own: more servers, nothing shared by mistake.
  }
}

/**
 * The managed Redis's port for `dir`: `OUTBOX_REDIS_PORT` (6379), unless a Redis outbox did not
 * start holds it; then the port the managed Redis moved to (`from` says which one it left alone):
 * this data dir's own move, else the one a managed Redis of another data dir runs on.
 */
export function managedTarget(dir: string, env: NodeJS.ProcessEnv = process.env): { port: number; from?: number } {
  const port = managedRedisPort(env);
  if (managedOwnerOf(port, env) !== undefined) return { port };
  const own = movedPortOf(dir, port);
  if (own !== undefined) return { port: own, from: port };
  try {
    const other = Number(readFileSync(movedRecordPath(port, env), 'utf8').trim());
    if (Number.isInteger(other) && managedOwnerOf(other, env) !== undefined) return { port: other, from: port };
  } catch {
    // No other data dir moved.
  }
  return { port };
}

/**
 * The default Redis URL (no `REDIS_URL`, no `--redis`): the managed Redis's port on 127.0.0.1
 * (`managedTarget`), with the password of the managed Redis that runs there (started for this data
 * dir or another), else of this data dir's, once `<dir>/redis/password` exists.
 */
export function managedRedisUrl(dir: string, env: NodeJS.ProcessEnv = process.env): string {
  const { port } = managedTarget(dir, env);
  const password = readManagedPassword(managedOwnerOf(port, env) ?? dir);
  const auth = password ? `:${encodeURIComponent(password)}@` : '';
  return `redis://${auth}${MANAGED_HOST}:${port}`;
}

/** A value for redis.conf: double-quoted, with `\` and `"` escaped (what redis-server's parser reads). */
function quoted(value: string): string {
  return `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

export interface ManagedRedisOptions {
  /** Fork into the background and log to `<dir>/redis/redis.log` (the CLI); else stay in front, logging to stdout (pm2). */
  daemonize: boolean;
}

/**
 * The managed Redis's settings, stated explicitly rather than left to redis-server's defaults:
 * outbox's state must survive a restart (AOF, fsynced before each answer), must never be evicted,
 * and only clients with the password get in. Passed on stdin: never on a command line (`ps`) nor in a file.
 *
 * `appendfsync always`, not Redis's `everysec`: with `everysec`, while a background fsync is under
 * way (a slow disk), Redis keeps new writes in memory, unwritten, for up to 2 s, and answers them
 * all the same, so a SIGKILLed Redis (a user's fault injection, the OOM killer) lost writes it had
 * acknowledged: events the relay had marked PUBLISHED. On this project's test machine the cost is
 * about 0.1 ms per answer to one client and a fifth of the throughput of pipelined writes.
 */
export function managedRedisConfig(dir: string, port: number, password: string, { daemonize }: ManagedRedisOptions): string {
  const redisDir = managedRedisDir(dir);
  return [
    `port ${port}`,
    `bind ${MANAGED_HOST}`,
    `dir ${quoted(redisDir)}`,
    'appendonly yes',
    'appendfsync always',
    // Redis's default, stated: with yes, Redis would not fsync while it rewrites the AOF.
    'no-appendfsync-on-rewrite no',
    'maxmemory-policy noeviction',
    'save ""',
    `requirepass ${quoted(password)}`,
    `pidfile ${quoted(pidPath(dir))}`,
    `daemonize ${daemonize ? 'yes' : 'no'}`,
    `logfile ${quoted(daemonize ? join(redisDir, 'redis.log') : '')}`,
    '',
  ].join('\n');
}

/** The settings the managed Redis runs with, as logged (no password). */
export const MANAGED_SETTINGS = { appendonly: 'yes', appendfsync: 'always', maxmemoryPolicy: 'noeviction', requirepass: 'yes' } as const;

/**
 * Starts redis-server with the managed settings, the password made first, `<dir>/redis` 0700 and
 * everything redis-server writes there 0600 (it runs under umask 077).
 */
export function spawnManagedRedis(dir: string, port: number, options: ManagedRedisOptions): ChildProcess {
  const password = ensureManagedPassword(dir);
  const previous = process.umask(PRIVATE_UMASK);
  let server: ChildProcess;
  try {
    server = spawn('redis-server', ['-'], {
      stdio: ['pipe', options.daemonize ? 'pipe' : 'inherit', options.daemonize ? 'pipe' : 'inherit'],
      detached: options.daemonize,
    });
  } finally {
    process.umask(previous);
  }
  // An ENOENT (not installed) fails the spawn, and stdin with it: the caller hears of it through 'error'.
  server.stdin!.on('error', () => {});
  server.stdin!.end(managedRedisConfig(dir, port, password, options));
  recordManagedOwner(dir, port);
  return server;
}

/**
 * Sends an inline `PING` on a plain socket (no client library: none is loaded for it) and resolves
 * the first bytes of the answer, or undefined when the port is closed, the server hangs up without
 * a word, or says nothing within `timeoutMs`.
 */
export function pingReply(port: number, host = MANAGED_HOST, timeoutMs = 1000): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host });
    const done = (value: string | undefined) => {
      socket.destroy();
      resolve(value);
    };
    socket.setTimeout(timeoutMs, () => done(undefined));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (data) => done(data.toString('latin1')));
    socket.on('error', () => done(undefined));
    socket.on('close', () => done(undefined));
  });
}

/** Whether a Redis answers on the port: anything in RESP to a PING (+PONG, or -NOAUTH with a password). */
export async function redisAnswers(port: number, host = MANAGED_HOST): Promise<boolean> {
  return /^[+-]/.test((await pingReply(port, host)) ?? '');
}

/** Whether anything accepts connections on the port (Redis or not). */
export function portOpen(port: number, host = MANAGED_HOST): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const NOT_INSTALLED = 'redis-server is not installed: apt-get install redis-server, or point --redis / REDIS_URL at a running Redis';

/** Whether the server on `port` is a managed Redis (of `dir` or of another data dir of this user). */
function managedOn(dir: string, port: number, env: NodeJS.ProcessEnv): boolean {
  if (managedOwnerOf(port, env) !== undefined) return true;
  const own = managedRedisState(dir);
  return own.state === 'running' && own.port === port;
}

/** The first port from `from` on where nothing listens. */
async function freePortFrom(from: number): Promise<number> {
  for (let port = from; port < Math.min(from + 100, 65536); port++) if (!(await portOpen(port))) return port;
  throw new StoreUnavailableError(`no free port from ${MANAGED_HOST}:${from} on for outbox's own redis-server: set OUTBOX_REDIS_PORT to a free port, or point --redis / REDIS_URL at a running Redis`);
}

/**
 * Where the managed Redis of `dir` runs or is to run (`managedTarget`), and whether it runs. A port
 * held by a server outbox did not start (a system Redis on 6379) is left alone: the managed Redis
 * moves to the first free port above it, recorded for the data dir, and `leftAlone` names the port.
 */
export async function managedPortFor(dir: string, env: NodeJS.ProcessEnv = process.env): Promise<{ port: number; running: boolean; leftAlone?: number }> {
  const target = managedTarget(dir, env);
  if (!(await portOpen(target.port))) return { port: target.port, running: false };
  if (managedOn(dir, target.port, env)) return { port: target.port, running: true };
  const leftAlone = target.from ?? target.port;
  const port = await freePortFrom(leftAlone + 1);
  recordMove(dir, leftAlone, port, env);
  return { port, running: false, leftAlone };
}

/**
 * For ecosystem.config.cjs, before pm2 starts any app: the managed Redis's port (moved beside a
 * Redis outbox did not start, see `managedPortFor`), its password made when it is to be started, so
 * that no app can look for either too early. One JSON line on stdout: `{port, running, leftAlone?}`.
 */
export async function prepareManagedRedis(dir: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const where = await managedPortFor(dir, env);
  if (!where.running) ensureManagedPassword(dir);
  process.stdout.write(`${JSON.stringify(where)}\n`);
}

/**
 * For the CLI: when `url` is the default (the managed Redis's URL for `dir`) and nothing listens on
 * its port, starts the managed Redis in the background and waits until it answers. Resolves the URL
 * to use (with the password, once there is one), whether it started the server, on which port, and
 * `leftAlone`: the port a server outbox did not start holds (a system Redis on 6379), which this
 * data dir's Redis then moved off (`managedTarget`): outbox never writes into a Redis it was not
 * pointed at.
 */
export async function ensureManagedRedis(
  dir: string,
  url: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ url: string; started: boolean; port?: number; leftAlone?: number }> {
  if (url !== managedRedisUrl(dir, env)) return { url, started: false };
  const { port, running, leftAlone } = await managedPortFor(dir, env);
  if (running) return { url, started: false, port };
  const server = spawnManagedRedis(dir, port, { daemonize: true });
  let output = '';
  server.stdout!.on('data', (chunk) => (output += chunk));
  server.stderr!.on('data', (chunk) => (output += chunk));
  const exit = await new Promise<number | string>((resolve) => {
    server.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    server.once('exit', (code, signal) => resolve(code ?? signal ?? 'killed'));
  });
  if (exit === 'ENOENT') throw new StoreUnavailableError(`no Redis on ${MANAGED_HOST}:${port} and ${NOT_INSTALLED}`);
  const deadline = Date.now() + 10_000;
  while (exit !== 0 || !(await redisAnswers(port))) {
    if (exit !== 0 || Date.now() > deadline) {
      const reason = lastLine(output) ?? lastLine(readLog(dir)) ?? `exit ${exit}`;
      throw new StoreUnavailableError(`cannot start redis-server on ${MANAGED_HOST}:${port} (${reason}): see ${join(managedRedisDir(dir), 'redis.log')}, or point --redis / REDIS_URL at a running Redis`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return { url: managedRedisUrl(dir, env), started: true, port, ...(leftAlone === undefined ? {} : { leftAlone }) };
}

function readLog(dir: string): string {
  try {
    return readFileSync(join(managedRedisDir(dir), 'redis.log'), 'utf8');
  } catch {
    return '';
  }
}

function lastLine(text: string): string | undefined {
  return text
    .trim()
    .split('\n')
    .filter((line) => !/Reading config from stdin/.test(line))
    .pop()
    ?.replace(/^\d+:[A-Z] [^#*.-]*[#*.-] /, '');
}

export type ManagedRedisState =
  | { state: 'running'; pid: number; port: number | undefined; underPm2: boolean }
  | { state: 'stopped' };

function readProc(pid: number, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * Whether the managed Redis of `dir` runs: its pid file names a live redis-server. `underPm2` when
 * its parent is pm2's `outbox-redis` (which would start it again after a stop).
 */
export function managedRedisState(dir: string): ManagedRedisState {
  let pid: number;
  try {
    pid = Number(readFileSync(pidPath(dir), 'utf8').trim());
  } catch {
    return { state: 'stopped' };
  }
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return { state: 'stopped' };
  const parent = Number(readProc(pid, 'stat')?.replace(/^.*\) /s, '').split(' ')[1]);
  const parentCommand = parent > 1 ? (readProc(parent, 'cmdline') ?? '') : '';
  // redis-server shows `redis-server <bind>:<port>` as its command line.
  const port = Number(/:(\d+)/.exec(readProc(pid, 'cmdline') ?? '')?.[1]) || undefined;
  return { state: 'running', pid, port, underPm2: /apps[/\\]redis[/\\]main\.js/.test(parentCommand) };
}

/** A live redis-server: not gone, not another program that got its pid, not a zombie waiting for its parent. */
function alive(pid: number): boolean {
  const stat = readProc(pid, 'stat');
  return stat !== undefined && /\(redis-server\) [^Z]/.test(stat);
}

/** Stops the managed Redis (SIGTERM: redis-server syncs its append-only file and exits); resolves once it is gone. */
export async function stopManagedRedis(pid: number, timeoutMs = 30_000): Promise<void> {
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new StoreUnavailableError(`redis-server (pid ${pid}) did not stop within ${timeoutMs / 1000} s: look at its log, or kill -9 ${pid}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
