import { within } from '../../outbox/sleep.js';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { ProcessDescription } from 'pm2';

/** One app of this deployment as pm2 runs it. */
export interface Pm2App {
  name: string;
  /** pm2's status: online, stopped, errored, launching, waiting restart, … */
  status: string;
  restarts: number;
  pid: number;
  /** Since pm2 last started it (ms), null when it is not running. */
  uptimeMs: number | null;
  /** CPU percent and memory bytes, as pm2 last measured them. */
  cpu: number;
  memory: number;
}

export interface Pm2Apps {
  /** The PM2_HOME asked. */
  home: string;
  /** Whether a pm2 daemon runs there. */
  running: boolean;
  /** Why there is no list, when there is none. */
  reason?: string;
  apps: Pm2App[];
}

/** How long one list may take (the daemon's RPC socket). */
const LIST_TIMEOUT_MS = 1000;

/** PM2_HOME as pm2 finds it: the variable, else ~/.pm2. */
export function pm2HomeOf(env: NodeJS.ProcessEnv = process.env): string {
  return env.PM2_HOME || join(homedir(), '.pm2');
}

/** A daemon runs at `home`: its pid file names a live process and its RPC socket is there. */
function daemonRuns(home: string): boolean {
  try {
    process.kill(Number(readFileSync(join(home, 'pm2.pid'), 'utf8').trim()), 0);
    return existsSync(join(home, 'rpc.sock'));
  } catch {
    return false;
  }
}

type Pm2Api = typeof import('pm2');


function describeApp(p: ProcessDescription, now: number): Pm2App {
  const env = p.pm2_env ?? {};
  const status = String(env.status ?? 'unknown');
  return {
    name: p.name ?? '?',
    status,
    restarts: env.restart_time ?? 0,
    pid: p.pid ?? 0,
    uptimeMs: status === 'online' && env.pm_uptime ? Math.max(0, now - env.pm_uptime) : null,
    cpu: p.monit?.cpu ?? 0,
    memory: p.monit?.memory ?? 0,
  };
}

/**
 * The apps the pm2 daemon of PM2_HOME runs for the data dir `dir` (their OUTBOX_DIR), through
 * pm2's programmatic API. It is loaded and connected only once a daemon runs there: connecting
 * to none would start one. An app that is not under pm2 (a test, a shell) gets `running: false`.
 */
export function pm2Apps(dir: string, env: NodeJS.ProcessEnv = process.env) {
  const home = pm2HomeOf(env);
  let api: Promise<Pm2Api> | undefined;
  const connect = async (): Promise<Pm2Api> => {
    const pm2 = (await import('pm2')).default;
    await within(new Promise<void>((done, fail) => pm2.connect((error) => (error ? fail(error) : done()))), LIST_TIMEOUT_MS, 'pm2 connect');
    return pm2;
  };
  const disconnect = () => {
    void api?.then((pm2) => pm2.disconnect()).catch(() => {});
    api = undefined;
  };
  return {
    async list(): Promise<Pm2Apps> {
      if (!daemonRuns(home)) {
        disconnect();
        return { home, running: false, reason: `no pm2 daemon runs with PM2_HOME ${home}`, apps: [] };
      }
      try {
        api ??= connect();
        const pm2 = await api;
        const all = await within(new Promise<ProcessDescription[]>((done, fail) => pm2.list((error, list) => (error ? fail(error) : done(list)))), LIST_TIMEOUT_MS, 'pm2 list');
        const now = Date.now();
        const ours = all.filter((p) => {
          const appDir = (p.pm2_env as Record<string, unknown> | undefined)?.OUTBOX_DIR;
          return typeof appDir === 'string' && resolve(appDir) === dir;
        });
        return { home, running: true, apps: ours.map((p) => describeApp(p, now)) };
      } catch (error) {
        disconnect();
        return { home, running: true, reason: `cannot list pm2's apps: ${(error as Error).message}`, apps: [] };
      }
    },
    close: disconnect,
  };
}
