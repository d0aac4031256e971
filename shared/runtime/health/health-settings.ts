import { parseDuration } from '../../outbox/duration.js';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';

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

/** A base port from 1 to 65535, or null for `0` / `off` (the endpoint is off). */
export function parseHealthPort(raw: string, name: string): number | null {
  const text = raw.trim();
  if (text === '0' || text.toLowerCase() === 'off') return null;
  const port = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new InvalidInputError(`${name} must be a port from 1 to 65535, or off, got ${JSON.stringify(raw)}`);
  return port;
}

/** `OUTBOX_STATS_EVERY`: a duration with a unit, or `off` (0: never). */
export function parseStatsEvery(raw: string, name: string): number {
  return raw.trim().toLowerCase() === 'off' ? 0 : parseDuration(raw, name);
}

/**
 * The base port of `app`'s health endpoint as `outbox status` finds it: `OUTBOX_RELAY_HEALTH_PORT` /
 * `OUTBOX_CONSUMER_HEALTH_PORT` (default 3100 / 3200); null when set to `0` or `off`.
 */
export function healthBasePortOf(app: HealthApp, env: NodeJS.ProcessEnv = process.env): number | null {
  const { env: name, defaultPort } = HEALTH_PORT_SETTINGS[app];
  const raw = (env[name] ?? '').trim();
  return raw === '' ? defaultPort : parseHealthPort(raw, name);
}

/**
 * Where this process's health endpoint listens: the base port plus the pm2 instance number
 * (`NODE_APP_INSTANCE`), so that pm2 `instances` > 1 get one port each. Null when it is off.
 */
export function healthEndpointOf(app: HealthApp, basePort: number | null, host: string, env: NodeJS.ProcessEnv = process.env): HealthEndpoint | null {
  if (basePort === null) return null;
  const instance = Number(env.NODE_APP_INSTANCE ?? 0);
  const port = basePort + (Number.isInteger(instance) && instance > 0 ? instance : 0);
  if (port > 65535) throw new InvalidInputError(`${HEALTH_PORT_SETTINGS[app].env} ${basePort} + pm2 instance ${instance} is beyond port 65535: choose a lower base port`);
  return { host, port };
}

/** A URL host for `host`: a wildcard address is reached on the loopback. */
export function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

export function healthUrlOf({ host, port }: HealthEndpoint): string {
  return `http://${reachableHost(host)}:${port}/healthz`;
}
