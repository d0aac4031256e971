import { createRequire } from 'node:module';
import { createConnection } from 'node:net';
import type { Redis as RedisClient } from 'ioredis';
import { keyPrefixOf, redactUrl } from '../config.js';
import { RedisSettingsError } from '../errors/redis-settings-error.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import { addUrlSecret } from '../log-secrets.js';
import type { Logger } from '../logger.js';
import { sleep } from '../sleep.js';
import { defineScripts } from './scripts.js';
import { checkRedisSettings } from './settings.js';

/**
 * ioredis is CommonJS: `import` makes node's ESM loader lex its entry and every file it re-exports
 * before running it, 30–50 ms more than `require` on this machine, paid by every CLI command.
 */
const { Redis } = createRequire(import.meta.url)('ioredis') as typeof import('ioredis');
type Redis = RedisClient;

/** LMOVE/BLMOVE arrived in Redis 6.2. */
export const MIN_REDIS_VERSION = [6, 2, 0] as const;

export interface RedisConnectOptions {
  /**
   * Reconnect forever with a capped backoff and queue commands meanwhile (long-running apps).
   * Default false: fail fast with a one-line error (the CLI).
   */
  reconnect?: boolean;
  /** Connection name shown by CLIENT LIST. Default 'outbox'. */
  name?: string;
  /** Milliseconds allowed for connecting and the checks together. Default 5000. */
  connectTimeoutMs?: number;
  /** Where to report a lost connection and the reconnect (apps). Default: not reported. */
  log?: Logger;
  /**
   * Every key this connection names gets `<namespace>:` in front (ioredis `keyPrefix`, which also
   * covers the KEYS of the Lua scripts and MULTI). Default '': the seed's own key names.
   */
  namespace?: string;
  /**
   * A partition's key prefix, added after the namespace's (`<namespace:>{p3}:`): the hash tag that
   * puts every key of the partition in one Redis Cluster slot. Default '': no partition.
   */
  partition?: string;
  /**
   * Refuse a Redis whose maxmemory-policy may evict keys (`checkRedisSettings`). For whatever
   * writes relay or consumer state. Default false: read-only commands and status still work.
   */
  requireNoEviction?: boolean;
}

/** A partition prefix: one hash tag and ':', e.g. '{p3}:' ('' is none). */
const PARTITION = /^\{[^{}]+\}:$/;

/** The keyPrefix of a connection with these options: `<namespace>:` then the partition's. */
export function connectionKeyPrefix(options: Pick<RedisConnectOptions, 'namespace' | 'partition'>): string {
  const partition = options.partition ?? '';
  if (partition !== '' && !PARTITION.test(partition)) throw new TypeError(`partition must be a hash tag and ":" like "{p3}:", got ${JSON.stringify(partition)}`);
  return keyPrefixOf(options.namespace ?? '') + partition;
}

/** ioredis's parser meeting a reply that is not RESP (an HTTP or other TCP server answered). */
const NOT_RESP = /Unknown RESP type|Protocol error/;

/** What to do about a failed connection, by its cause. */
function hint(reason: string): string {
  if (/WRONGPASS|NOAUTH|invalid password|AUTH/i.test(reason)) return 'check the user and password in --redis / REDIS_URL';
  if (/certificate|CERT_|self.signed/i.test(reason)) return 'let Node trust the server\'s CA: NODE_EXTRA_CA_CERTS=/path/to/ca.pem';
  if (/no answer within/.test(reason)) return 'check the host and port, and whether the server expects TLS (rediss://) or not (redis://)';
  return 'start redis-server or point --redis / REDIS_URL at a running one';
}

/** A connection error as a short reason: its code, else its message. */
export function describeError(error: unknown): string {
  if (!error) return 'connection closed';
  const { code, message } = error as { code?: string; message?: string };
  return code ?? message ?? String(error);
}

/** Fails with a `StoreUnavailableError` naming the version when Redis is older than 6.2. */
export async function checkRedisVersion(redis: Redis, url: string): Promise<string> {
  const info = await redis.info('server');
  const version = /redis_version:([\d.]+)/.exec(info)?.[1] ?? '0.0.0';
  const parts = version.split('.').map(Number);
  for (let i = 0; i < MIN_REDIS_VERSION.length; i += 1) {
    const part = parts[i] ?? 0;
    if (part > MIN_REDIS_VERSION[i]) break;
    if (part < MIN_REDIS_VERSION[i]) {
      throw new StoreUnavailableError(
        `Redis at ${redactUrl(url)} is version ${version}; outbox needs ${MIN_REDIS_VERSION.join('.')} or newer (for LMOVE)`,
      );
    }
  }
  return version;
}

/**
 * Opens a checked connection with the project's Lua scripts defined. Connection errors are reported
 * with the (password-redacted) URL and what to do; nothing is written before the checks pass.
 */
export async function connectRedis(url: string, options: RedisConnectOptions = {}): Promise<Redis> {
  const reconnect = options.reconnect ?? false;
  // Whatever ioredis or a caller puts in a log line later, this password is not in it.
  addUrlSecret(url);
  const redis = new Redis(url, {
    lazyConnect: true,
    connectionName: options.name ?? 'outbox',
    keyPrefix: connectionKeyPrefix(options),
    connectTimeout: options.connectTimeoutMs ?? 5000,
    // ioredis waits this long for a 'close' that a refused socket already emitted before exiting.
    disconnectTimeout: 100,
    enableAutoPipelining: true,
    enableOfflineQueue: reconnect,
    maxRetriesPerRequest: reconnect ? null : 1,
    retryStrategy: reconnect ? (attempt) => Math.min(50 * 2 ** attempt, 2000) : () => null,
  });
  let lastError: unknown;
  // Kept apart from lastError: a server that is not Redis (HTTP) may also close the socket, and the
  // EPIPE that follows must not hide that its answer was not RESP.
  let sawNonResp = false;
  redis.on('error', (error) => {
    lastError = error;
    if (NOT_RESP.test(String((error as Error)?.message))) sawNonResp = true;
  });
  const timeoutMs = options.connectTimeoutMs ?? 5000;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    const checked = redis.connect().then(async () => {
      await checkRedisVersion(redis, url);
      if (options.requireNoEviction) await checkRedisSettings(redis, url);
    });
    await Promise.race([checked, deadline]);
  } catch (error) {
    redis.disconnect();
    if (error instanceof StoreUnavailableError) throw error;
    const reason = describeError(lastError ?? error);
    // A server that hung up on our first command (an HTTP server does) may not have let ioredis
    // read its answer: ask it once more, with an inline PING.
    const hungUp = /^(EPIPE|ECONNRESET)$/.test(reason) && !url.startsWith('rediss:') && (await answersResp(url)) === false;
    if (sawNonResp || hungUp || NOT_RESP.test(reason)) {
      throw new StoreUnavailableError(
        `the server at ${redactUrl(url)} does not speak the Redis protocol (it is another kind of server): point --redis / REDIS_URL at a Redis server`,
      );
    }
    throw new StoreUnavailableError(`cannot connect to Redis at ${redactUrl(url)} (${reason}): ${hint(reason)}`);
  } finally {
    clearTimeout(timer);
  }
  defineScripts(redis);
  if (options.log) reportReconnects(redis, url, options.log);
  return redis;
}

/**
 * Sends `PING` to the server at `url` on a plain socket: true when it answers in RESP, false when it
 * answers something else or hangs up without a word, undefined when it cannot be reached or says
 * nothing within 500 ms.
 */
function answersResp(url: string): Promise<boolean | undefined> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = createConnection({ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port || 6379) });
    let answer = '';
    const done = (value: boolean | undefined) => {
      socket.destroy();
      resolve(value);
    };
    socket.setTimeout(500, () => done(answer === '' ? undefined : /^[+\-:$*]/.test(answer)));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      answer += chunk.toString('latin1');
      done(/^[+\-:$*]/.test(answer));
    });
    // Refused or reset: no answer either way (Redis may just be down).
    socket.on('error', () => done(undefined));
    socket.on('close', () => done(answer === '' ? false : /^[+\-:$*]/.test(answer)));
  });
}

/** Logs a lost connection (with its last error) and the reconnect; `url` as it may be logged. */
function reportReconnects(redis: Redis, url: string, log: Logger): void {
  let lost = false;
  let lastError: unknown;
  redis.on('error', (error) => (lastError = error));
  redis.on('close', () => {
    if (lost || redis.status === 'end') return;
    lost = true;
    log.warn('redis connection lost, reconnecting', { url, error: lastError ? describeError(lastError) : undefined });
  });
  redis.on('ready', () => {
    if (!lost) return;
    lost = false;
    log.info('redis reconnected', { url });
  });
}

/**
 * For long-running apps: connects like `connectRedis` (with reconnects unless `reconnect` is
 * false), retrying the first connection with a capped backoff until it works or `signal` aborts.
 * A Redis that is too old, or that may evict keys when `requireNoEviction` is set, is not retried:
 * waiting does not change it.
 */
export async function connectUntilReady(
  url: string,
  options: RedisConnectOptions & { log: Logger; signal?: AbortSignal },
): Promise<Redis> {
  return retryUntilReady(() => connectRedis(url, { ...options, reconnect: options.reconnect ?? true }), url, options);
}

/**
 * Calls `connect` until it resolves, with a capped backoff, logging each failure with `target`;
 * what waiting does not change (too old, may evict) or an abort by `signal` is thrown at once.
 */
export async function retryUntilReady(connect: () => Promise<Redis>, target: string, options: { log: Logger; signal?: AbortSignal }): Promise<Redis> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await connect();
    } catch (error) {
      if (error instanceof RedisSettingsError || (error instanceof StoreUnavailableError && /version/.test(error.message))) throw error;
      if (options.signal?.aborted) throw error;
      const delayMs = Math.min(2000, 100 * 2 ** attempt);
      options.log.warn('redis unavailable, retrying', { url: target, attempt, delayMs, error: (error as Error).message });
      await sleep(delayMs, options.signal);
    }
  }
}

/** Closes politely, or at once when the connection is already gone. */
export async function closeRedis(redis: Redis): Promise<void> {
  if (redis.status === 'ready') {
    await redis.quit().catch(() => redis.disconnect());
  } else {
    redis.disconnect();
  }
}
