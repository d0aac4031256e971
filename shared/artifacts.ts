import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Writes `lines` (newline-terminated) to `<dir>/<name>` atomically; resolves the path. */
export function writeArtifact(dir: string, name: string, lines: string[]): string {
  const path = join(dir, name);
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, lines.map((line) => `${line}\n`).join(''), { mode: 0o600 });
  renameSync(temp, path);
  return path;
}
