import { count, text, type ValuesOf } from './settings.js';
import { storeSettings } from './store-settings.js';

/** The dashboard's default port: next to the producer's 3000, the relay's 3100 and the consumer's 3200. */
export const DEFAULT_DASHBOARD_PORT = 3300;

/**
 * The dashboard app's settings (outbox-dashboard). Its own variables, not PORT / HOST: under pm2
 * those are the producer's, which the dashboard reads to find the producer's health endpoint.
 * `OUTBOX_DASHBOARD_PORT=off` is read by ecosystem.config.cjs only (it then leaves the app out).
 */
export const dashboardSettings = {
  ...storeSettings,
  /** HTTP port of the page. Default 3300; 0: any free port (logged). */
  port: count({ flag: 'port', env: 'OUTBOX_DASHBOARD_PORT', default: String(DEFAULT_DASHBOARD_PORT), min: 0, max: 65_535, describe: 'HTTP port of the dashboard page; 0: any free port' }),
  /** Address to bind. Default 127.0.0.1. */
  host: text({ flag: 'host', env: 'OUTBOX_DASHBOARD_HOST', default: '127.0.0.1', range: 'an address', describe: 'address the dashboard binds', check: (value) => (value.trim() === '' ? 'must be an address to bind' : undefined) }),
};

export type DashboardConfig = ValuesOf<typeof dashboardSettings>;

