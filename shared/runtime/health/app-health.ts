import { request } from 'node:http';
import type { ConsumerHeartbeat } from '../../outbox/consumer/heartbeats.js';
import type { HealthReport } from './health-report.js';
import { HEALTH_PATH } from './health-server.js';
import { healthBasePortOf, healthUrlOf, HEALTH_HOST_ENV, DEFAULT_HEALTH_HOST } from './health-settings.js';

/** How long `outbox status` waits for an app's health endpoint. */
export const PROBE_TIMEOUT_MS = 500;

export interface HealthTarget {
  app: string;
  url: string;
}

/** An app's health as `outbox status` found it. */
export interface AppHealth extends HealthTarget {
  /**
   * `ok` (200), `unhealthy` (503: `reason` says why), `not running` (nothing listens), `no answer`
   * (no answer in time: stopped, frozen or overloaded; or not a health endpoint), `elsewhere` (an
   * app of another data dir or namespace answers on that port).
   */
  state: 'ok' | 'unhealthy' | 'not running' | 'no answer' | 'elsewhere';
  reason?: string;
  report?: HealthReport;
}

/**
 * Where the apps' health endpoints are, from the same settings the apps read (as set where
 * `outbox status` runs): the producer's `/healthz` on `HOST`:`PORT` (default 127.0.0.1:3000); each
 * relay on `OUTBOX_RELAY_HEALTH_PORT` + its pm2 instance (`OUTBOX_RELAY_INSTANCES` of them); each
 * consumer at the URL its heartbeat carries (stopped ones left out), else on `OUTBOX_CONSUMER_HEALTH_PORT`.
 */
export function healthTargetsOf(heartbeats: ConsumerHeartbeat[], env: NodeJS.ProcessEnv = process.env): HealthTarget[] {
  const host = (env[HEALTH_HOST_ENV] ?? '').trim() || DEFAULT_HEALTH_HOST;
  const targets: HealthTarget[] = [{ app: 'outbox-producer', url: healthUrlOf({ host: env.HOST || '127.0.0.1', port: Number(env.PORT || 3000) }) }];
  const relayPort = healthBasePortOf('relay', env);
  if (relayPort !== null) {
    const instances = Math.max(1, Number(env.OUTBOX_RELAY_INSTANCES || 1) || 1);
    for (let i = 0; i < instances; i += 1) targets.push({ app: 'outbox-relay', url: healthUrlOf({ host, port: relayPort + i }) });
  }
  const consumerUrls = [...new Set(heartbeats.filter((beat) => beat.state !== 'stopped' && beat.health).map((beat) => beat.health!))];
  const consumerPort = healthBasePortOf('consumer', env);
  if (consumerUrls.length === 0 && consumerPort !== null) consumerUrls.push(healthUrlOf({ host, port: consumerPort }));
  for (const url of consumerUrls) targets.push({ app: 'outbox-consumer', url });
  return targets;
}

function get(url: string, timeoutMs: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs, headers: { connection: 'close' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })));
    req.on('error', reject);
    req.end();
  });
}

/**
 * Asks one health endpoint, within `timeoutMs`; never throws. `expected` is the data dir and
 * namespace of the deployment status looks at: an answer from another one is `elsewhere`.
 */
export async function probeHealth(target: HealthTarget, expected: { dir: string; namespace: string }, timeoutMs = PROBE_TIMEOUT_MS): Promise<AppHealth> {
  let answer: { status: number; body: string };
  try {
    answer = await get(target.url, timeoutMs);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ECONNREFUSED') return { ...target, state: 'not running', reason: 'nothing listens' };
    return { ...target, state: 'no answer', reason: code === 'ETIMEDOUT' ? `no answer within ${timeoutMs} ms (stopped, frozen or overloaded)` : (error as Error).message };
  }
  let report: HealthReport;
  try {
    report = JSON.parse(answer.body) as HealthReport;
    if (typeof report.ok !== 'boolean' || !target.url.endsWith(HEALTH_PATH)) throw new Error('no ok field');
  } catch {
    return { ...target, state: 'no answer', reason: `HTTP ${answer.status} that is not an outbox health report` };
  }
  if (report.app !== undefined && report.app !== target.app) return { ...target, state: 'elsewhere', reason: `${report.app} answers there`, report };
  if ((report.dir !== undefined && report.dir !== expected.dir) || (report.namespace !== undefined && report.namespace !== expected.namespace)) {
    const namespace = report.namespace ? ` in namespace ${report.namespace}` : '';
    return { ...target, state: 'elsewhere', reason: `an app of another deployment answers there (${report.dir}${namespace})`, report };
  }
  if (answer.status === 200 && report.ok) return { ...target, state: 'ok', report };
  return { ...target, state: 'unhealthy', reason: report.reason ?? `HTTP ${answer.status}`, report };
}
