import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { InvalidInputError } from './errors/invalid-input-error.js';

/** Where the stores are. Every app and command reads the same two settings. */
export interface OutboxConfig {
  /** Data directory: holds `app.db` and every artifact. Default: env `OUTBOX_DIR`, else `~/outbox`. */
  dir: string;
  /** Redis connection URL (`redis://` or `rediss://`). Default: env `REDIS_URL`, else `redis://127.0.0.1:6379`. */
  redisUrl: string;
}

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

export function defaultDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.OUTBOX_DIR || join(homedir(), 'outbox');
}

export function defaultRedisUrl(env: NodeJS.ProcessEnv = process.env): string {
  return env.REDIS_URL || DEFAULT_REDIS_URL;
}

export function withDefaults(partial: Partial<OutboxConfig>, env: NodeJS.ProcessEnv = process.env): OutboxConfig {
  return {
    dir: resolve(partial.dir || defaultDir(env)),
    redisUrl: partial.redisUrl || defaultRedisUrl(env),
  };
}

/** Checks the settings before any connection is opened. */
export function validate(config: OutboxConfig): OutboxConfig {
  let url: URL;
  try {
    url = new URL(config.redisUrl);
  } catch {
    throw new InvalidInputError(`--redis must be a URL like redis://127.0.0.1:6379, got "${redactUrl(config.redisUrl)}"`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new InvalidInputError(`--redis must start with redis:// or rediss://, got "${redactUrl(config.redisUrl)}"`);
  }
  return config;
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
