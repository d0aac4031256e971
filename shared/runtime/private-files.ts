import { chmodSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';

/** What outbox writes is for its user only: files 0600, directories 0700. */
export const PRIVATE_UMASK = 0o077;

/**
 * Sets the process's umask to 077, so that every file it (SQLite's app.db, -wal, -shm; the
 * artifacts) or a child it starts (redis-server's append-only files) creates is 0600, and every
 * directory 0700. Called first thing by the CLI and the apps (main thread only: workers share it).
 */
export function keepFilesPrivate(): void {
  process.umask(PRIVATE_UMASK);
}

/** Writes `text` to `path`, 0600, whole: into a temp file beside it, then renamed, so a reader never sees half a file. */
export function writePrivateFile(path: string, text: string): void {
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, text, { mode: 0o600 });
  renameSync(temp, path);
}

/** A directory of outbox's own, created with its missing parents (0700) and tightened to 0700 if it exists. */
export function makePrivateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  chmodSync(path, 0o700);
}
