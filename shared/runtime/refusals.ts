import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writePrivateFile } from './private-files.js';

/**
 * Why an app refused to start, kept where `outbox status` finds it: `<dir>/refused/<app>.json`
 * (directory 0700, file 0600), written by the app just before it exits with EXIT_CONFIG and
 * removed once it starts fine. pm2 shows the app stopped; this says why.
 */
export interface Refusal {
  app: string;
  /** ISO time of the refusal. */
  at: string;
  exitCode: number;
  message: string;
}

const refusedDir = (dir: string) => join(dir, 'refused');
const fileOf = (dir: string, app: string) => join(refusedDir(dir), `${app}.json`);

/** Records `refusal` (written whole, then renamed: a reader never sees half a file). Throws when the data dir is not writable. */
export function recordRefusal(dir: string, refusal: Refusal): void {
  mkdirSync(refusedDir(dir), { recursive: true, mode: 0o700 });
  writePrivateFile(fileOf(dir, refusal.app), `${JSON.stringify(refusal)}\n`);
}

/** Forgets `app`'s refusal: it started fine. */
export function clearRefusal(dir: string, app: string): void {
  rmSync(fileOf(dir, app), { force: true });
}

/** The refusals recorded in `dir`, by app; a file that does not parse is skipped. */
export function readRefusals(dir: string): Refusal[] {
  let names: string[];
  try {
    names = readdirSync(refusedDir(dir));
  } catch {
    return [];
  }
  const refusals: Refusal[] = [];
  for (const name of names.filter((n) => n.endsWith('.json')).sort()) {
    try {
      refusals.push(JSON.parse(readFileSync(join(refusedDir(dir), name), 'utf8')) as Refusal);
    } catch {
      // Removed meanwhile, or not ours.
    }
  }
  return refusals;
}

/** `outbox-relay refused to start at <time>: <message>` (exit code <n>). */
export function describeRefusal(refusal: Refusal): string {
  return `${refusal.app} refused to start at ${refusal.at} (exit code ${refusal.exitCode}): ${refusal.message}`;
}
