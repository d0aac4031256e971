import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI_PATH = fileURLToPath(new URL('../../apps/cli/main.js', import.meta.url));

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliEnv {
  dir: string;
  redisUrl: string;
  env?: Record<string, string>;
}

export interface StartedCli {
  child: ChildProcess;
  done: Promise<CliResult>;
  /** What it printed so far. */
  stdout(): string;
  stderr(): string;
}

/** Starts `outbox <args>` as a real process with OUTBOX_DIR / REDIS_URL set. */
export function startCli(args: string[], { dir, redisUrl, env = {} }: CliEnv): StartedCli {
  return startScript(CLI_PATH, args, { OUTBOX_DIR: dir, REDIS_URL: redisUrl, ...env });
}

/** Starts `node <script> <args>` with `env` over this process's and no crash point armed, collecting its output. */
export function startScript(script: string, args: string[], env: Record<string, string>): StartedCli {
  const child = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, OUTBOX_CRASH_POINTS: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk) => (stdout += chunk));
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const done = new Promise<CliResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return { child, done, stdout: () => stdout, stderr: () => stderr };
}

export function runCli(args: string[], env: CliEnv): Promise<CliResult> {
  return startCli(args, env).done;
}
