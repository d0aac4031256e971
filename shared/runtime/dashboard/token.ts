import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../outbox/errors/config-error.js';

/** The file that holds the dashboard's token, in the data dir. */
export const tokenPath = (dir: string) => join(dir, 'dashboard-token');

const MIN_LENGTH = 16;

/**
 * The token the dashboard's actions (retry, drop) require: `<dir>/dashboard-token`, made on the
 * first start (32 random bytes, hex; 0600, created exclusively so that two starts agree on one)
 * and kept. A file that exists is made 0600 and used as it is: delete it and restart to get a new
 * one, or write one of at least 16 characters.
 */
export function ensureToken(dir: string): string {
  // A data dir that exists keeps its mode (see docs/operations.md, Security); a new one is 0700.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = tokenPath(dir);
  try {
    writeFileSync(path, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw new ConfigError(`cannot write the dashboard token ${path}: ${(error as Error).message}`);
    chmodSync(path, 0o600);
  }
  const token = readFileSync(path, 'utf8').trim();
  if (token.length < MIN_LENGTH) throw new ConfigError(`the dashboard token ${path} has fewer than ${MIN_LENGTH} characters: delete it and start the dashboard again to get a new one`);
  return token;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Whether `given` is the token, compared in constant time (digests of equal length, whatever was given). */
export function tokenMatches(given: string | undefined, token: string): boolean {
  return timingSafeEqual(digest(given ?? ''), digest(token)) && given !== undefined;
}
