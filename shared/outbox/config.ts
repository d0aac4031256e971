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
  /**
   * A Redis Cluster instead of `redisUrl`: some of its nodes, `host:port,…` (see `parseClusterNodes`).
   * Default: env `OUTBOX_REDIS_CLUSTER`, else '' (none).
   */
  redisCluster?: string;
  /**
   * Events are partitioned by aggregate into this many queues (shared/outbox/redis/partitions.ts);
   * the same on every relay and consumer of a store. Default: env `OUTBOX_PARTITIONS`, else 1.
   */
  partitions?: number;
  /**
   * The outbox database (SQLite) by its path, for the CLI's operations commands (`--db` /
   * `OUTBOX_DB`): any database with the library's tables. Default: `<dir>/app.db`.
   */
  db?: string;
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

/** The SQLite database a command opens: `--db` / `OUTBOX_DB` when given, else `<dir>/app.db`. */
export function databaseFileOf(config: Pick<OutboxConfig, 'dir' | 'db'>): string {
  return config.db ?? databasePath(config.dir);
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

/** One node of a Redis Cluster as `OUTBOX_REDIS_CLUSTER` names it. */
export interface ClusterNode {
  host: string;
  port: number;
  username?: string;
  password?: string;
}

const CLUSTER_EXAMPLE = '127.0.0.1:7000,127.0.0.1:7001';

/** The entries of `OUTBOX_REDIS_CLUSTER=host:port,redis://[:password@]host:port,…` (use `clusterNodesProblem` first). */
export function parseClusterNodes(raw: string): string[] {
  return raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}

/** The node an entry names (`host:port`, `[ipv6]:port` or `redis://[user:password@]host:port`), or a problem. */
export function clusterNodeOf(entry: string): ClusterNode | string {
  let url: URL;
  try {
    url = new URL(/^[a-z]+:\/\//i.test(entry) ? entry : `redis://${entry}`);
  } catch {
    return `"${redactUrl(entry)}" is not host:port`;
  }
  if (url.protocol !== 'redis:') return `"${redactUrl(entry)}" must be host:port or redis://host:port (rediss:// is not supported for a cluster)`;
  if (url.hostname === '' || url.port === '') return `"${redactUrl(entry)}" must name a host and a port, like 127.0.0.1:7000`;
  if (url.pathname !== '' && url.pathname !== '/') return `"${redactUrl(entry)}" names a database: a cluster has only database 0`;
  const node: ClusterNode = { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port) };
  if (url.username) node.username = decodeURIComponent(url.username);
  if (url.password) node.password = decodeURIComponent(url.password);
  return node;
}

/** Why `raw` is not a list of cluster nodes outbox can use, or undefined. */
export function clusterNodesProblem(raw: string): string | undefined {
  const entries = parseClusterNodes(raw);
  if (entries.length === 0) return `must list the cluster's nodes like ${CLUSTER_EXAMPLE}, got ${JSON.stringify(raw)}`;
  const nodes: ClusterNode[] = [];
  for (const entry of entries) {
    const node = clusterNodeOf(entry);
    if (typeof node === 'string') return `${node}: list the cluster's nodes like ${CLUSTER_EXAMPLE}`;
    nodes.push(node);
  }
  const credentials = new Set(nodes.filter((n) => n.password !== undefined || n.username !== undefined).map((n) => `${n.username ?? ''}\n${n.password ?? ''}`));
  if (credentials.size > 1) return 'names different users or passwords for different nodes: one user and password apply to every node of the cluster';
  return undefined;
}
