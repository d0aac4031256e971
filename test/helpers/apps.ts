import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT } from '../../shared/tooling/local/pm2.js';
import type { CliEnv } from './cli.js';

export interface App {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts a built app (e.g. `dist/apps/relay/main.js`) on `env`'s data dir and Redis, collecting its
 * output. Health endpoints are off unless `extraEnv` sets their ports (test files run side by side).
 */
export function startApp(env: CliEnv, script: string, args: string[] = [], extraEnv: Record<string, string> = {}): App {
  const child = spawn(process.execPath, [join(REPO_ROOT, script), ...args], {
    env: { ...process.env, OUTBOX_DIR: env.dir, REDIS_URL: env.redisUrl, OUTBOX_RELAY_HEALTH_PORT: 'off', OUTBOX_CONSUMER_HEALTH_PORT: 'off', ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => output, exited };
}

/** Signals the app unless it already exited, and resolves with how it exited. */
export async function stopApp(app: App, signal: NodeJS.Signals = 'SIGTERM') {
  if (app.child.exitCode === null && app.child.signalCode === null) app.child.kill(signal);
  return app.exited;
}

/**
 * Stops every app in order (`stopApp`), then asserts each exited 0: an app that exits otherwise
 * fails the test without leaving the ones after it running (which would keep the test file alive).
 */
export async function stopApps(apps: readonly App[], signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  const exits = [];
  for (const app of apps) exits.push(await stopApp(app, signal));
  exits.forEach((exit, i) => assert.equal(exit.code, 0, apps[i].output()));
}
