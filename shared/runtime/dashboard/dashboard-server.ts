import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import type { Logger } from '../../outbox/logger.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import type { HeldKind } from '../../operations/recovery/held-messages.js';
import { actOnHeld, type HeldAction } from './held-actions.js';
import type { DashboardState } from './sampler.js';
import type { StaticFile } from './static-files.js';
import { tokenMatches } from './token.js';

export interface DashboardRoutes {
  files: Map<string, StaticFile>;
  state: (since: number) => Promise<DashboardState | undefined>;
  /** The partitions' connections (one without partitions), once open. */
  queues: () => Partitions | undefined;
  token: string;
  tokenFile: string;
  /** OUTBOX_DASHBOARD_HOST: a name given there is a Host requests may name. */
  host: string;
  log: Logger;
}

/** The page may not be framed (a framed page's buttons could be clicked for the user) nor load anything from elsewhere. */
const PAGE_HEADERS = {
  'content-security-policy': "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

const ACTION = /^\/api\/(dead-letter|parked)\/(retry|drop)$/;
const MAX_BODY = 4096;

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const json = JSON.stringify(body);
  res.writeHead(status, { ...PAGE_HEADERS, 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), 'cache-control': 'no-store', ...headers });
  res.end(json);
}

/** The body, or undefined when it is over MAX_BODY (read to its end all the same, so that the answer reaches the client). */
function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    let body = '';
    let tooLong = false;
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      if (!tooLong) body += chunk;
      tooLong ||= body.length > MAX_BODY;
    });
    req.on('end', () => resolve(tooLong ? undefined : body));
    req.on('error', reject);
  });
}

/**
 * A page of another site that a DNS name resolving to 127.0.0.1 serves (DNS rebinding) must not
 * read this one: the Host a request names must be an address, `localhost`, or the configured host.
 */
function hostAllowed(req: IncomingMessage, configuredHost: string): boolean {
  let hostname: string;
  try {
    hostname = new URL(`http://${req.headers.host ?? ''}`).hostname.replace(/^\[(.*)\]$/, '$1');
  } catch {
    return false;
  }
  return isIP(hostname) !== 0 || hostname === 'localhost' || hostname === configuredHost;
}

const bearer = (req: IncomingMessage) => /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];

/** POST /api/<dead-letter|parked>/<retry|drop> {"key"}: the token first; a refused request changes nothing. */
async function act(req: IncomingMessage, res: ServerResponse, routes: DashboardRoutes, kind: HeldKind, action: HeldAction): Promise<void> {
  if (!tokenMatches(bearer(req), routes.token)) {
    routes.log.warn('dashboard action refused: missing or wrong token', { kind, action, remote: req.socket.remoteAddress });
    return send(res, 401, { error: `missing or wrong token: send "Authorization: Bearer <token>" with the token of ${routes.tokenFile}` }, { 'www-authenticate': 'Bearer' });
  }
  const body = await readBody(req);
  if (body === undefined) return send(res, 413, { error: `the body is over ${MAX_BODY} bytes` });
  let key: unknown;
  try {
    key = (JSON.parse(body) as { key?: unknown }).key;
  } catch {
    key = undefined;
  }
  if (typeof key !== 'string' || key === '') return send(res, 400, { error: 'send {"key": "<the entry\'s key>"} as JSON' });
  const queues = routes.queues();
  if (!queues || queues.clients.some((client) => client.status !== 'ready')) return send(res, 503, { error: 'Redis is not connected: try again' });
  const outcome = await actOnHeld(queues, kind, action, key);
  routes.log.info(`dashboard ${kind} ${action}`, { key, outcome });
  if (outcome === 'gone') return send(res, 404, { error: `no ${kind} entry ${key}: moved or dropped meanwhile` });
  if (outcome === 'refused') return send(res, 409, { error: `${kind} entry ${key} is not an envelope the consumer writes and cannot be retried: drop it` });
  send(res, 200, { kind, action, key, outcome });
}

/** The dashboard's request handler: the page and its files (GET, HEAD), GET /api/state, the POST actions. */
export function dashboardHandler(routes: DashboardRoutes) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    const action = ACTION.exec(path);
    if (!hostAllowed(req, routes.host)) return send(res, 421, { error: 'the Host of this request is not an address, localhost or OUTBOX_DASHBOARD_HOST: open the dashboard by its address' });
    try {
      if (action) {
        if (req.method !== 'POST') return send(res, 405, { error: `use POST on ${path}` }, { allow: 'POST' });
        return await act(req, res, routes, action[1] as HeldKind, action[2] as HeldAction);
      }
      const file = routes.files.get(path);
      if (!file && path !== '/api/state') return send(res, 404, { error: `no route ${path}` });
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, { error: `use GET on ${path}` }, { allow: 'GET, HEAD' });
      if (file) {
        res.writeHead(200, { ...PAGE_HEADERS, 'content-type': file.type, 'content-length': file.body.length, 'cache-control': 'no-cache' });
        return void res.end(req.method === 'HEAD' ? undefined : file.body);
      }
      const since = Number(url.searchParams.get('since') ?? 0);
      const state = await routes.state(Number.isFinite(since) ? since : 0);
      if (!state) return send(res, 503, { error: 'no sample yet: see the dashboard log' });
      send(res, 200, state);
    } catch (error) {
      routes.log.error('dashboard request failed', { error, path });
      if (!res.headersSent) send(res, 500, { error: 'internal error' });
    }
  };
}
