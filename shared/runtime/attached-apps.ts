import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ConflictError } from '../outbox/errors/conflict-error.js';
import { writePrivateFile } from './private-files.js';

/**
 * Which apps have app.db open: each long-running app that opens it registers itself as
 * `<dir>/attached/<app>.<pid>.json` while it runs, so that `outbox init --force` and `outbox lab`
 * do not pull the database from under them. A registration whose process is gone (SIGKILL) is
 * stale: ignored and removed.
 */
export interface AttachedApp {
  app: string;
  pid: number;
}

const attachedDir = (dir: string) => join(dir, 'attached');
const FILE = /^(.+)\.(\d+)\.json$/;

/** Registers this process as `app` on `dir` until it exits (any exit but SIGKILL); resolves the function that unregisters. */
export function attachApp(dir: string, app: string): () => void {
  mkdirSync(dir, { recursive: true });
  mkdirSync(attachedDir(dir), { recursive: true, mode: 0o700 });
  const file = join(attachedDir(dir), `${app}.${process.pid}.json`);
  writePrivateFile(file, `${JSON.stringify({ app, pid: process.pid, startedAt: new Date().toISOString() })}\n`);
  const detach = () => rmSync(file, { force: true });
  process.once('exit', detach);
  return detach;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The apps attached to `dir` whose process runs; stale registrations are removed. */
export function attachedApps(dir: string): AttachedApp[] {
  let names: string[];
  try {
    names = readdirSync(attachedDir(dir));
  } catch {
    return [];
  }
  const apps: AttachedApp[] = [];
  for (const name of names) {
    const match = FILE.exec(name);
    if (!match) continue;
    const app = { app: match[1], pid: Number(match[2]) };
    if (isRunning(app.pid)) apps.push(app);
    else rmSync(join(attachedDir(dir), name), { force: true });
  }
  return apps.sort((a, b) => a.app.localeCompare(b.app) || a.pid - b.pid);
}

/** Refuses (exit code 4) while an app has `dir`'s app.db open. */
export function assertNoAttachedApps(dir: string): void {
  const apps = attachedApps(dir);
  if (apps.length === 0) return;
  const named = apps.map(({ app, pid }) => `${app} (pid ${pid})`).join(', ');
  throw new ConflictError(
    `${named} ${apps.length === 1 ? 'has' : 'have'} ${join(dir, 'app.db')} open: stop them first: npx pm2 stop ecosystem.config.cjs, or pass --ignore-attached`,
  );
}
