import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { ConflictError } from '../../outbox/errors/conflict-error.js';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { NotFoundError } from '../../outbox/errors/not-found-error.js';
import { StoreUnavailableError } from '../../outbox/errors/store-unavailable-error.js';
import type { HealthReport } from '../../runtime/health/health-report.js';
import { HEALTH_PATH, sendHealth } from '../../runtime/health/health-server.js';
import { METRICS_PATH } from '../../runtime/metrics/app-metrics.js';
import type { Logger } from '../../outbox/logger.js';
import type { NewOrder, Order, OrderWrite } from '../orders/order-service.js';

/** The order service the API serves: the SQLite one (synchronous) or the PostgreSQL one (async). */
export interface OrderApiService {
  placeOrder(order: NewOrder): OrderWrite | Promise<OrderWrite>;
  changeQty(id: number, qty: number): OrderWrite | Promise<OrderWrite>;
  cancelOrder(id: number): OrderWrite | Promise<OrderWrite>;
  getOrder(id: number): Order | undefined | Promise<Order | undefined>;
}
import { parseOrderId, parseQty, parseSku } from '../orders/validate.js';

export interface OrderApiOptions {
  /** Largest accepted request body, in bytes. Default 16384. */
  maxBodyBytes?: number;
  /** What GET /healthz answers (200 when ok, else 503). Default `{ok: true}`. */
  health?: () => HealthReport | Promise<HealthReport>;
  /** Answers GET /metrics (Prometheus exposition). Default: no such route. */
  metrics?: (res: ServerResponse) => Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const json = JSON.stringify(body);
  // After a 413 the rest of the body is not read: the connection cannot be reused.
  if (status === 413) res.setHeader('connection', 'close');
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
  res.end(json);
}

/** `application/json`, nothing else (not `application/json-patch+json`); the body is read as UTF-8. */
const JSON_TYPE = /^application\/json\s*(;\s*charset\s*=\s*("utf-8"|utf-8)\s*)?$/i;

/** The first key a JSON text repeats in one object (at any depth), or undefined: JSON.parse keeps the last silently. */
export function duplicateKey(text: string): string | undefined {
  // Per open container: the keys of an object, null for an array.
  const open: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (c === '{' || c === '[') {
      open.push(c === '{' ? new Set() : null);
      expectKey = c === '{';
    } else if (c === '}' || c === ']') open.pop();
    else if (c === ',') expectKey = open[open.length - 1] instanceof Set;
    else if (c === '"') {
      let end = i + 1;
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      const keys = open[open.length - 1];
      if (expectKey && keys) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return key;
        keys.add(key);
      }
      expectKey = false;
      i = end;
    }
  }
  return undefined;
}

async function readJson(req: IncomingMessage, maxBytes: number): Promise<Record<string, unknown>> {
  if (!JSON_TYPE.test(req.headers['content-type'] ?? '')) {
    throw new HttpError(415, 'send a JSON body with content-type: application/json (charset utf-8, if any)');
  }
  if (Number(req.headers['content-length'] ?? 0) > maxBytes) throw new HttpError(413, `body larger than ${maxBytes} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new HttpError(413, `body larger than ${maxBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  let body: unknown;
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    body = JSON.parse(text);
  } catch {
    throw new HttpError(400, 'body is not valid JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new HttpError(400, 'body must be a JSON object');
  const repeated = duplicateKey(text);
  if (repeated !== undefined) throw new HttpError(400, `duplicate key ${JSON.stringify(repeated)} in the JSON body`);
  return body as Record<string, unknown>;
}

/** Rejects fields the endpoint does not know, so a typo is an error and not silently ignored. */
function only(body: Record<string, unknown>, allowed: string[]): Record<string, unknown> {
  const unknown = Object.keys(body).filter((key) => !allowed.includes(key));
  if (unknown.length > 0) throw new InvalidInputError(`unknown field${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; allowed: ${allowed.join(', ')}`);
  return body;
}

/** A JSON number where a number is due: the CLI parses strings, the API does not. */
function number(body: Record<string, unknown>, name: string): unknown {
  if (body[name] !== undefined && typeof body[name] !== 'number') {
    throw new InvalidInputError(`${name} must be a JSON number, got ${JSON.stringify(body[name])}`);
  }
  return body[name];
}

/** The path of a request target; a malformed one (`http://[`) is a 400, not a failure. */
function pathOf(target: string): string {
  try {
    return new URL(target, 'http://localhost').pathname;
  } catch {
    throw new HttpError(400, `malformed request target ${JSON.stringify(target.slice(0, 100))}`);
  }
}

/**
 * Bounds what idle or slow clients hold: a connection idle (or sending its request slowly) for
 * `idleTimeoutMs` is closed, and past `maxConnections` new ones are refused, so /healthz stays reachable.
 */
export function boundConnections(server: Server, { idleTimeoutMs, maxConnections }: { idleTimeoutMs: number; maxConnections: number }): void {
  server.timeout = idleTimeoutMs;
  server.keepAliveTimeout = Math.min(5000, idleTimeoutMs);
  server.headersTimeout = idleTimeoutMs;
  server.requestTimeout = Math.max(idleTimeoutMs, 30_000);
  server.maxConnections = maxConnections;
}

function decodePathPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new HttpError(400, `${JSON.stringify(part)} is not a valid percent-encoded path segment`);
  }
}

function written({ order, eventId, seq, eventType }: OrderWrite) {
  return { orderId: order.id, sku: order.sku, qty: order.qty, status: order.status, eventId, eventType, seq };
}

const STATUS_OF = new Map<Function, number>([
  [InvalidInputError, 400],
  [NotFoundError, 404],
  [ConflictError, 409],
  [StoreUnavailableError, 503],
]);

/**
 * The order service over HTTP. Every write is one SQLite transaction (order row + outbox row);
 * Redis is never touched, so orders are accepted while it is down.
 *
 *   POST /orders {sku, qty}       -> 201 {orderId, eventId, ...}
 *   POST /orders/:id/qty {qty}    -> 200
 *   POST /orders/:id/cancel       -> 200
 *   GET  /orders/:id              -> 200 {id, sku, qty, status, version}
 *   GET  /healthz                 -> 200 {ok: true, checks}, or 503 {ok: false, reason, checks}
 *   GET  /metrics                 -> 200, Prometheus text (when given `metrics`)
 *   HEAD on a GET route           -> the same status and headers, no body
 *
 * Without a usable app.db (missing, deleted or replaced under the app) every order call is a 503.
 */
export function createOrderApi(service: OrderApiService, log: Logger, options: OrderApiOptions = {}) {
  const maxBodyBytes = options.maxBodyBytes ?? 16_384;

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = pathOf(req.url ?? '/');
    const method = req.method ?? 'GET';
    // HEAD is answered wherever GET is, with the same status and headers (node sends no body).
    const allow = (methods: string) => {
      if (methods === 'GET') methods = 'GET, HEAD';
      if (!methods.split(', ').includes(method)) {
        res.setHeader('allow', methods);
        throw new HttpError(405, `use ${methods} on ${path}`);
      }
    };

    if (path === HEALTH_PATH) {
      allow('GET');
      return sendHealth(res, (await options.health?.()) ?? { ok: true });
    }
    if (path === METRICS_PATH && options.metrics) {
      allow('GET');
      return options.metrics(res);
    }
    if (path === '/orders') {
      allow('POST');
      const body = only(await readJson(req, maxBodyBytes), ['sku', 'qty']);
      return send(res, 201, written(await service.placeOrder({ sku: parseSku(body.sku), qty: parseQty(number(body, 'qty')) })));
    }
    const match = /^\/orders\/([^/]+)(?:\/(qty|cancel))?$/.exec(path);
    if (!match) throw new HttpError(404, `no route ${path}`);
    const id = parseOrderId(decodePathPart(match[1]), 'order id');
    if (match[2] === 'qty') {
      allow('POST');
      const body = only(await readJson(req, maxBodyBytes), ['qty']);
      return send(res, 200, written(await service.changeQty(id, parseQty(number(body, 'qty')))));
    }
    if (match[2] === 'cancel') {
      allow('POST');
      return send(res, 200, written(await service.cancelOrder(id)));
    }
    allow('GET');
    const order = await service.getOrder(id);
    if (!order) throw new NotFoundError(`no order ${id}`);
    return send(res, 200, order);
  }

  return async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await route(req, res);
    } catch (error) {
      // The client went away mid-request (an abort, a reset): nothing to answer, nothing wrong here.
      if ((error as { code?: string }).code === 'ECONNRESET') {
        log.debug('request aborted by the client', { method: req.method, url: req.url });
        return;
      }
      const status = error instanceof HttpError ? error.status : STATUS_OF.get((error as Error).constructor);
      if (status) return send(res, status, { error: (error as Error).message });
      log.error('request failed', { method: req.method, url: req.url, error, stack: (error as Error).stack });
      send(res, /SQLITE_BUSY|database is locked/.test(String(error)) ? 503 : 500, { error: 'internal error' });
    }
  };
}
