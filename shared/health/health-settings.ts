import { parseDuration } from '../duration.js';
import { InvalidInputError } from '../errors/invalid-input-error.js';

/** Where an app's health endpoint listens. */
export interface HealthEndpoint {
  host: string;
  port: number;
}

export type HealthApp = 'relay' | 'consumer';

/** The settings of the relay's and the consumer's health endpoints: env var and default base port. */
export const HEALTH_PORT_SETTINGS: Record<HealthApp, { env: string; defaultPort: number }> = {
  relay: { env: 'OUTBOX_RELAY_HEALTH_PORT', defaultPort: 3100 },
  consumer: { env: 'OUTBOX_CONSUMER_HEALTH_PORT', defaultPort: 3200 },
};

export const HEALTH_HOST_ENV = 'OUTBOX_HEALTH_HOST';
export const DEFAULT_HEALTH_HOST = '127.0.0.1';
export const STATS_EVERY_ENV = 'OUTBOX_STATS_EVERY';
export const DEFAULT_STATS_EVERY_MS = 10_000;

/**
 * The base port of `app`'s health endpoint: `OUTBOX_RELAY_HEALTH_PORT` / `OUTBOX_CONSUMER_HEALTH_PORT`
 * (default 3001 / 3002); null when set to `0` or `off`. Anything else than a port is refused.
 */
export function healthBasePortOf(app: HealthApp, env: NodeJS.ProcessEnv = process.env): number | null {
  const { env: name, defaultPort } = HEALTH_PORT_SETTINGS[app];
  const raw = (env[name] ?? '').trim();
  if (raw === '') return defaultPort;
  if (raw === '0' || raw.toLowerCase() === 'off') return null;
  const port = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new InvalidInputError(`${name} must be a port from 1 to 65535, or off, got ${JSON.stringify(raw)}`);
  return port;
}

/**
 * Where this process's health endpoint listens: the base port plus the pm2 instance number
 * (`NODE_APP_INSTANCE`), so that pm2 `instances` > 1 get one port each; on `OUTBOX_HEALTH_HOST`
 * (default 127.0.0.1). Null when it is off. Read before anything connects, so a bad value stops the app.
 */
export function healthEndpointOf(app: HealthApp, env: NodeJS.ProcessEnv = process.env): HealthEndpoint | null {
  const base = healthBasePortOf(app, env);
  if (base === null) return null;
  const instance = Number(env.NODE_APP_INSTANCE ?? 0);
  const port = base + (Number.isInteger(instance) && instance > 0 ? instance : 0);
  if (port > 65535) throw new InvalidInputError(`${HEALTH_PORT_SETTINGS[app].env} ${base} + pm2 instance ${instance} is beyond port 65535: choose a lower base port`);
  return { host: (env[HEALTH_HOST_ENV] ?? '').trim() || DEFAULT_HEALTH_HOST, port };
}

/** How often the relay and the consumer log their `relay stats` / `consumer stats` line (ms; 0 = never): `OUTBOX_STATS_EVERY`, default 10s. */
export function statsEveryMsOf(env: NodeJS.ProcessEnv = process.env): number {
  const raw = (env[STATS_EVERY_ENV] ?? '').trim();
  if (raw === '') return DEFAULT_STATS_EVERY_MS;
  if (raw.toLowerCase() === 'off') return 0;
  return parseDuration(raw, STATS_EVERY_ENV);
}

/** A URL host for `host`: a wildcard address is reached on the loopback. */
export function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

export function healthUrlOf({ host, port }: HealthEndpoint): string {
  return `http://${reachableHost(host)}:${port}/healthz`;
}
