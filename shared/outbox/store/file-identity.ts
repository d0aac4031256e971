import { statSync } from 'node:fs';

/** Which file a path names (st_dev + st_ino); undefined when none. */
export type FileIdentity = { dev: number; ino: number } | undefined;

/** Which file `path` names now. */
export function identityOf(path: string): FileIdentity {
  const stats = statSync(path, { throwIfNoEntry: false });
  return stats && { dev: stats.dev, ino: stats.ino };
}

/** Whether two identities are the same existing file. */
export const same = (a: FileIdentity, b: FileIdentity) => a !== undefined && b !== undefined && a.dev === b.dev && a.ino === b.ino;
