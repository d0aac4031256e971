import { DEFAULT_HEALTH_HOST, HEALTH_HOST_ENV, HEALTH_PORT_SETTINGS, STATS_EVERY_ENV, parseHealthPort, parseStatsEvery, type HealthApp } from '../health/health-settings.js';
import { custom, text } from './settings.js';

/** The relay's or the consumer's health endpoint and stats line: part of the app's own settings, checked with them. */
export function healthSettings(app: HealthApp) {
  const port = HEALTH_PORT_SETTINGS[app];
  return {
    /** Base port of the GET/HEAD /healthz endpoint (plus the pm2 instance number); null when `off`. Default 3100 (relay) / 3200 (consumer). */
    healthPort: custom({ env: port.env, default: String(port.defaultPort), range: 'a port from 1 to 65535; 0 or off: none', describe: `port of the ${app}'s /healthz and /metrics (plus the pm2 instance number); 0 or off: none`, parse: parseHealthPort }),
    /** Address the health endpoint binds. Default 127.0.0.1. */
    healthHost: text({ env: HEALTH_HOST_ENV, default: DEFAULT_HEALTH_HOST, range: 'an address', describe: 'address the health endpoints bind', check: (value) => (value.trim() === '' ? 'must be an address' : undefined) }),
    /** Interval of the `relay stats` / `consumer stats` line, ms; 0 = off. Default 10s. */
    statsEveryMs: custom({ env: STATS_EVERY_ENV, default: '10s', range: 'a duration with a unit; off (or 0s): never', describe: 'how often the app logs its stats line (`relay stats`, `consumer stats`); off: never', parse: parseStatsEvery }),
  };
}
