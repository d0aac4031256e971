import { createRequire } from 'node:module';
import { createConnection } from 'node:net';
import type { Cluster as ClusterClient, Redis } from 'ioredis';
import { clusterNodeOf, type ClusterNode } from '../config.js';
import { InvalidInputError } from '../errors/invalid-input-error.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import { addLogSecret } from '../log-secrets.js';
import { checkRedisVersion, connectionKeyPrefix, describeError, retryUntilReady, type RedisConnectOptions } from './connect.js';
import type { Logger } from '../logger.js';
import { defineScripts } from './scripts.js';
import { checkRedisSettings } from './settings.js';

/** Lazily, as connect.ts loads Redis: ioredis is CommonJS. */
const { Cluster } = createRequire(import.meta.url)('ioredis') as typeof import('ioredis');

/** The nodes for messages: `host:port,…`, never a password. */
export function describeClusterNodes(nodes: readonly ClusterNode[]): string {
  return nodes.map((n) => (n.host.includes(':') ? `[${n.host}]:${n.port}` : `${n.host}:${n.port}`)).join(',');
}

function parseNodes(entries: readonly string[]): ClusterNode[] {
  if (entries.length === 0) throw new InvalidInputError('no Redis Cluster nodes given: list them like 127.0.0.1:7000,127.0.0.1:7001');
  return entries.map((entry) => {
    const node = clusterNodeOf(entry);
    if (typeof node === 'string') throw new InvalidInputError(`cluster node ${node}`);
    return node;
  });
}

/** What to do about a cluster that cannot be reached or used, by its cause. */
function hint(reason: string): string {
  if (/WRONGPASS|NOAUTH|invalid password|AUTH/i.test(reason)) return 'check the user and password in OUTBOX_REDIS_CLUSTER';
  if (/cluster support disabled/i.test(reason)) return 'these nodes are not a cluster: use REDIS_URL for a single Redis, or enable cluster mode';
  return "start the cluster's nodes or point OUTBOX_REDIS_CLUSTER at running ones";
}

/**
 * Connects to a Redis Cluster like `connectRedis` connects to one Redis: the same options (the key
 * prefix is `<namespace:><partition>`, so a partition's hash tag puts every key it names in one
 * slot), the version check and `requireNoEviction` on every master, the scripts defined, a one-line
 * `StoreUnavailableError` naming the nodes when it cannot be used. `nodes`: `host:port` or
 * `redis://[user:password@]host:port` each; one user and password apply to every node.
 *
 * Returned as `Redis`: a Cluster has the same command API (commands, `defineCommand`, pipelines
 * within one slot, `options.keyPrefix`, `status`, `quit`), which is all this project's code uses.
 * `isCluster` tells them apart where it matters (SCAN, multi-key UNLINK, describeRedis).
 */
export async function connectRedisCluster(nodes: string[], options: RedisConnectOptions = {}): Promise<Redis> {
  const parsed = parseNodes(nodes);
  const described = describeClusterNodes(parsed);
  const { username, password } = parsed.find((n) => n.password !== undefined || n.username !== undefined) ?? {};
  addLogSecret(password);
  const reconnect = options.reconnect ?? false;
  const timeoutMs = options.connectTimeoutMs ?? 5000;
  const backoff = (attempt: number) => Math.min(50 * 2 ** attempt, 2000);
  const cluster: ClusterClient = new Cluster(
    parsed.map(({ host, port }) => ({ host, port })),
    {
      lazyConnect: true,
      keyPrefix: connectionKeyPrefix(options),
      enableAutoPipelining: true,
      enableOfflineQueue: reconnect,
      clusterRetryStrategy: reconnect ? backoff : () => null,
      // A node that restarts keeps its slots: reconnect to it rather than wait for a MOVED that never comes.
      clusterNodeRetryStrategy: reconnect ? backoff : null,
      // A restarted master answers CLUSTERDOWN for 2 s (Redis's CLUSTER_WRITABLE_DELAY); ioredis retries
      // CLUSTERDOWN maxRedirections (16) times this far apart: 100 ms (its default) gave up after 1.6 s.
      retryDelayOnClusterDown: reconnect ? 500 : 100,
      slotsRefreshTimeout: Math.min(timeoutMs, 2000),
      redisOptions: {
        connectionName: options.name ?? 'outbox',
        connectTimeout: timeoutMs,
        disconnectTimeout: 100,
        maxRetriesPerRequest: reconnect ? null : 1,
        ...(username ? { username } : {}),
        ...(password ? { password } : {}),
      },
    },
  );
  let lastError: unknown;
  cluster.on('error', (error) => (lastError = error));
  cluster.on('node error', (error) => (lastError = error));
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    const checked = cluster.connect().then(async () => {
      // Each master is its own server: every one must be new enough and keep its keys.
      await Promise.all(
        cluster.nodes('master').map(async (node) => {
          const at = `redis://${node.options.host}:${node.options.port}`;
          await checkRedisVersion(node, at);
          if (options.requireNoEviction) await checkRedisSettings(node, at);
        }),
      );
    });
    await Promise.race([checked, deadline]);
  } catch (error) {
    cluster.disconnect();
    if (error instanceof StoreUnavailableError) throw error;
    let reason = describeError(lastError ? causeOf(lastError) : error);
    // ioredis reports a node it could not reach as "Connection is closed.": ask the sockets why.
    if (/Connection is closed|None of startup nodes/.test(reason)) reason = (await socketErrorOf(parsed)) ?? reason;
    throw new StoreUnavailableError(`cannot connect to the Redis Cluster at ${described} (${reason}): ${hint(reason)}`);
  } finally {
    clearTimeout(timer);
  }
  // The one documented cast: see above.
  const redis = cluster as unknown as Redis;
  defineScripts(redis);
  if (options.log) reportNodeReconnects(cluster, `cluster ${described}`, options.log);
  return redis;
}

/**
 * Logs each master connection lost and back, as `reportReconnects` does for one Redis (same
 * messages, with `node`): the cluster client itself closes only when every node is gone, and a
 * node that restarts keeps its slots, so its connection's own events are what tell.
 */
function reportNodeReconnects(cluster: ClusterClient, url: string, log: Logger): void {
  const watched = new WeakSet<Redis>();
  const watch = (node: Redis) => {
    if (watched.has(node)) return;
    watched.add(node);
    const at = `${node.options.host}:${node.options.port}`;
    let lost = false;
    let lastError: unknown;
    node.on('error', (error) => (lastError = error));
    node.on('close', () => {
      if (lost || cluster.status === 'end' || cluster.status === 'disconnecting' || node.status === 'end') return;
      lost = true;
      log.warn('redis connection lost, reconnecting', { url, node: at, error: lastError ? describeError(lastError) : undefined });
    });
    node.on('ready', () => {
      if (!lost) return;
      lost = false;
      log.info('redis reconnected', { url, node: at });
    });
  };
  cluster.nodes('master').forEach(watch);
  cluster.on('+node', watch);
}

/**
 * For long-running apps: `connectRedisCluster` (with reconnects unless `reconnect` is false) until
 * it works or `signal` aborts, as `connectUntilReady` does for one Redis.
 */
export async function connectClusterUntilReady(
  nodes: string[],
  options: RedisConnectOptions & { log: Logger; signal?: AbortSignal },
): Promise<Redis> {
  return retryUntilReady(() => connectRedisCluster(nodes, { ...options, reconnect: options.reconnect ?? true }), `cluster ${describeClusterNodes(parseNodes(nodes))}`, options);
}

/** The first connect error (e.g. ECONNREFUSED) of a plain socket to each node, or undefined when one connects. */
async function socketErrorOf(nodes: readonly ClusterNode[]): Promise<string | undefined> {
  const codes = await Promise.all(
    nodes.map(
      ({ host, port }) =>
        new Promise<string | undefined>((resolve) => {
          const socket = createConnection({ host, port });
          socket.setTimeout(500, () => {
            socket.destroy();
            resolve('no answer within 500 ms');
          });
          socket.once('connect', () => {
            socket.destroy();
            resolve(undefined);
          });
          socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
        }),
    ),
  );
  return codes.every((code) => code !== undefined) ? codes[0] : undefined;
}

/** ClusterAllFailedError carries the last node's error as `lastNodeError`. */
function causeOf(error: unknown): unknown {
  return (error as { lastNodeError?: unknown }).lastNodeError ?? error;
}
