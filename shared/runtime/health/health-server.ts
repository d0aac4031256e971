import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from '../../outbox/logger.js';
import type { OutboxMetrics } from '../../outbox/metrics/outbox-metrics.js';
import { METRICS_PATH, sendMetrics } from '../metrics/app-metrics.js';
import type { HealthReport } from './health-report.js';
import { healthUrlOf, type HealthEndpoint } from './health-settings.js';

export const HEALTH_PATH = '/healthz';

/** Answers a health request: 200 with the report when it is ok, else 503 with it (HEAD: no body). Never cached. */
export function sendHealth(res: ServerResponse, report: { ok: boolean }): void {
  const json = JSON.stringify(report);
  res.writeHead(report.ok ? 200 : 503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), 'cache-control': 'no-store' });
  res.end(json);
}

function sendError(res: ServerResponse, status: number, error: string, headers: Record<string, string> = {}): void {
  const json = JSON.stringify({ error });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), ...headers });
  res.end(json);
}

/** The request handler of an app's endpoint: GET and HEAD on /healthz and (given `metrics`) /metrics; 404 elsewhere, 405 for other methods. */
export function healthHandler(check: () => Promise<HealthReport>, log: Logger, metrics?: OutboxMetrics) {
  const routes = metrics ? `GET ${HEALTH_PATH} and GET ${METRICS_PATH}` : `GET ${HEALTH_PATH}`;
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path !== HEALTH_PATH && !(metrics && path === METRICS_PATH)) return sendError(res, 404, `no route ${path}: the endpoints are ${routes}`);
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 405, `use GET, HEAD on ${path}`, { allow: 'GET, HEAD' });
    if (path === METRICS_PATH) return sendMetrics(res, metrics!, log);
    try {
      sendHealth(res, await check());
    } catch (error) {
      log.error('health check failed', { error });
      sendError(res, 500, 'internal error');
    }
  };
}

/**
 * The relay's and the consumer's one HTTP listener on `endpoint`: `GET`/`HEAD /healthz`, and
 * `/metrics` given `metrics`; none when `endpoint` is null. A port in use does not stop the app
 * (it works without its endpoint): it logs one error line naming the setting, and `outbox status`
 * then shows no answer from it.
 */
export async function startHealthServer(
  endpoint: HealthEndpoint | null,
  setting: string,
  check: () => Promise<HealthReport>,
  log: Logger,
  metrics?: OutboxMetrics,
): Promise<{ url: string | null; close: () => Promise<void> }> {
  if (endpoint === null) return { url: null, close: async () => {} };
  const server: Server = createServer(healthHandler(check, log, metrics));
  const listening = await new Promise<boolean>((resolve) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      log.error(`health endpoint not started: ${endpoint.host}:${endpoint.port} ${error.code === 'EADDRINUSE' ? 'is in use' : `cannot be bound (${error.code ?? error.message})`}: set ${setting} to a free port, or off`, { error });
      resolve(false);
    });
    server.listen(endpoint.port, endpoint.host, () => resolve(true));
  });
  if (!listening) return { url: null, close: async () => {} };
  // Probes must not keep the process alive, nor delay its stop.
  server.unref();
  const url = healthUrlOf(endpoint);
  log.info('health endpoint listening', { url, ...(metrics ? { metrics: url.replace(/\/healthz$/, METRICS_PATH) } : {}) });
  return {
    url,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
