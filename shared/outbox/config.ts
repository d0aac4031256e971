import { homedir } from 'node:os';
import { join } from 'node:path';

/** Where the stores are. Every app and command reads the same two settings. */
export interface OutboxConfig {
  /** Data directory: holds `app.db` and every artifact. Default: env `OUTBOX_DIR`, else `~/outbox`. */
  dir: string;
  /**
   * Redis connection URL (`redis://` or `rediss://`). Default: env `REDIS_URL`, else the managed
   * Redis: `redis://127.0.0.1:<OUTBOX_REDIS_PORT, 6379>`, with the password of `<dir>/redis/password`
   * once there is one (shared/tooling/local/managed-redis.ts).
   */
  redisUrl: string;
  /**
   * Prefix of every Redis key and of the BullMQ queues (`<namespace>:`), so that several deployments
   * can share one Redis. Default: env `OUTBOX_NAMESPACE`, else none: the seed's own key names.
   */
  namespace: string;
  /**
   * The outbox store: '' (or unset) for `<dir>/app.db` (SQLite), else a `postgres://` URL: the
   * PostgreSQL store. Default: env `OUTBOX_DATABASE_URL`, else ''.
   */
  databaseUrl?: string;
}

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

export function defaultDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.OUTBOX_DIR || join(homedir(), 'outbox');
}

/** Letters, digits, ".", "_" and "-": no ":" (the separator) and nothing SCAN would read as a pattern. */
const NAMESPACE = /^[A-Za-z0-9._-]{1,64}$/;

/** Why `raw` is not a Redis URL outbox can use, or undefined. */
export function redisUrlProblem(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `must be a URL like ${DEFAULT_REDIS_URL}, got "${redactUrl(raw)}"`;
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') return `must start with redis:// or rediss://, got "${redactUrl(raw)}"`;
  return undefined;
}

const DATABASE_URL_EXAMPLE = 'postgres://user@127.0.0.1:5432/outbox';

/** Why `raw` is not a store outbox can use ('' is app.db in the data dir), or undefined. */
export function databaseUrlProblem(raw: string): string | undefined {
  if (raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `must be a URL like ${DATABASE_URL_EXAMPLE} (or empty for app.db in the data dir), got "${redactUrl(raw)}"`;
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') return `must start with postgres:// or postgresql:// (or be empty for app.db in the data dir), got "${redactUrl(raw)}"`;
  if (url.hostname === '' && !url.searchParams.has('host')) return `names no host: write it like ${DATABASE_URL_EXAMPLE}, got "${redactUrl(raw)}"`;
  return undefined;
}

/** Why `namespace` cannot be used ('' is none), or undefined. */
export function namespaceProblem(namespace: string): string | undefined {
  if (namespace !== '' && !NAMESPACE.test(namespace)) return `must be 1-64 letters, digits, ".", "_" or "-", got ${JSON.stringify(namespace)}`;
  const clash = clashWithUnprefixedKeys(namespace);
  if (clash) return `${JSON.stringify(namespace)} would share keys with the deployment without a namespace (${clash}): choose another name`;
  return undefined;
}

/**
 * Why a namespace's keys (`<namespace>:*`) would overlap the seed's own, unprefixed names, or null.
 * Those start with `outbox.`, `outbox:`, `inventory:` and `bull:`, so `outbox`, `inventory`, `bull`
 * and any `outbox.<x>` would let `init --force` or `lab` of one deployment delete the other's keys.
 */
function clashWithUnprefixedKeys(namespace: string): string | null {
  if (['outbox', 'inventory', 'bull'].includes(namespace)) return `its keys would start with "${namespace}:"`;
  if (namespace.startsWith('outbox.')) return 'its keys would start with "outbox."';
  return null;
}

/** What every Redis key starts with in `namespace`: `<namespace>:`, or nothing. */
export function keyPrefixOf(namespace: string): string {
  return namespace === '' ? '' : `${namespace}:`;
}

export function databasePath(dir: string): string {
  return join(dir, 'app.db');
}

/** The URL with any password replaced by `***`, safe to print. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (!url.password) return raw;
    url.password = '***';
    return url.toString();
  } catch {
    return raw.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
  }
}
