import { join } from 'node:path';
import { writePrivateFile } from '../runtime/private-files.js';

/** Writes `lines` (newline-terminated) to `<dir>/<name>` atomically; resolves the path. */
export function writeArtifact(dir: string, name: string, lines: string[]): string {
  const path = join(dir, name);
  writePrivateFile(path, lines.map((line) => `${line}\n`).join(''));
  return path;
}
