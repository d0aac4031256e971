import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The project root (this file is dist/shared/local/pm2.js once built). */
export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const PM2_BIN = fileURLToPath(new URL('../../../../node_modules/pm2/bin/pm2', import.meta.url));

export interface Pm2Process {
  name: string;
  pid: number;
  /** `pm_uptime`: when the daemon last started the app (ms since the epoch). */
  pm2_env: { status: string; restart_time: number; exit_code?: number; pm_uptime?: number };
}

/** pm2 with a private PM2_HOME (short: the daemon's socket path has a length limit). */
export class Pm2 {
  readonly home = mkdtempSync('/tmp/pm2-');

  /**
   * `env` on top of this process's; the relay's and the consumer's health endpoints and the
   * dashboard are off unless `env` sets their ports, so that private runs (tests, chaos, bench)
   * never take another's ports.
   */
  constructor(private readonly env: Record<string, string>) {
    this.env = { OUTBOX_RELAY_HEALTH_PORT: 'off', OUTBOX_CONSUMER_HEALTH_PORT: 'off', OUTBOX_DASHBOARD_PORT: 'off', ...env };
  }

  run(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [PM2_BIN, ...args], {
        cwd: REPO_ROOT,
        env: { ...process.env, ...this.env, PM2_HOME: this.home, PM2_DISABLE_VERSION_CHECK: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk) => (stdout += chunk));
      child.stderr.on('data', (chunk) => (stderr += chunk));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
  }

  async list(): Promise<Pm2Process[]> {
    const { stdout } = await this.run('jlist');
    return JSON.parse(stdout.slice(stdout.indexOf('['))) as Pm2Process[];
  }

  async process(name: string): Promise<Pm2Process> {
    const found = (await this.list()).find((p) => p.name === name);
    if (!found) throw new Error(`pm2 has no app ${name}`);
    return found;
  }

  /** Stops the daemon and every app it runs, and removes PM2_HOME. */
  async kill(): Promise<void> {
    await this.run('kill');
    rmSync(this.home, { recursive: true, force: true });
  }
}
