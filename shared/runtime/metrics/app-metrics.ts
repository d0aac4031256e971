import type { ServerResponse } from 'node:http';
import { createOutboxMetrics, type OutboxMetrics } from '../../outbox/metrics/outbox-metrics.js';
import type { Logger } from '../../outbox/logger.js';

export const METRICS_PATH = '/metrics';

/**
 * An app's metrics: the library's (shared/outbox/metrics), with prom-client's process metrics
 * (CPU, memory, event loop lag, …) and the label `app` on every series, so that a page or a
 * Prometheus that scrapes the three apps tells them apart.
 */
export async function appMetrics(app: string): Promise<OutboxMetrics> {
  const metrics = await createOutboxMetrics({ processMetrics: true });
  metrics.registry.setDefaultLabels({ app });
  return metrics;
}

/** Answers GET /metrics with the exposition text (HEAD: the headers). Never cached; a failed collect is a 500, logged. */
export async function sendMetrics(res: ServerResponse, metrics: Pick<OutboxMetrics, 'text' | 'contentType'>, log: Logger): Promise<void> {
  let text: string;
  try {
    text = await metrics.text();
  } catch (error) {
    log.error('cannot collect the metrics', { error });
    const json = JSON.stringify({ error: 'internal error' });
    res.writeHead(500, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
    res.end(json);
    return;
  }
  res.writeHead(200, { 'content-type': metrics.contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(text);
}
