import assert from 'node:assert/strict';
import { createServer, request, type Server } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { openDatabase, type Db } from '../shared/outbox/store/open-database.js';
import { createDatabase } from '../shared/lab/init-stores.js';
import { createLogger } from '../shared/outbox/logger.js';
import { createOrderService } from '../shared/lab/orders/order-service.js';
import { boundConnections, createOrderApi } from '../shared/lab/producer/http-api.js';
import { count, tempDir } from './helpers/stores.js';

let server: Server;
let db: Db;
let dir: string;
let base: string;
const logged: string[] = [];

before(async () => {
  dir = tempDir();
  createDatabase(dir);
  db = openDatabase(dir);
  server = createServer(createOrderApi(createOrderService(db), createLogger('test', (line) => logged.push(line)), { maxBodyBytes: 1024 }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
after(() => {
  server.close();
  db.close();
});

async function call(method: string, path: string, body?: string, type = 'application/json') {
  const response = await fetch(`${base}${path}`, { method, body, headers: body === undefined ? {} : { 'content-type': type } });
  return { status: response.status, body: await response.json(), headers: response.headers };
}

const rows = () => [count(dir, 'SELECT COUNT(*) FROM orders'), count(dir, 'SELECT COUNT(*) FROM outbox')];

/** Sends `text` on a socket of its own; resolves everything the server answered before it closed. */
function raw(text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect((server.address() as { port: number }).port, '127.0.0.1', () => socket.end(text));
    let reply = '';
    socket.on('data', (chunk) => (reply += chunk));
    socket.on('close', () => resolve(reply));
    socket.on('error', reject);
  });
}

describe('producer HTTP API', () => {
  it('POST /orders places an order and its event in one transaction: 201', async () => {
    const { status, body } = await call('POST', '/orders', '{"sku":"SKU-A","qty":3}');
    assert.equal(status, 201);
    assert.equal(body.sku, 'SKU-A');
    assert.equal(body.qty, 3);
    assert.equal(body.eventType, 'OrderPlaced');
    assert.equal(body.seq, 1);
    assert.match(body.eventId, /^[0-9a-f-]{36}$/);
    assert.deepEqual((await call('GET', `/orders/${body.orderId}`)).body, { id: body.orderId, sku: 'SKU-A', qty: 3, status: 'PLACED', version: 1 });
  });

  it('changes the quantity and cancels, each appending the next seq', async () => {
    const { body: placed } = await call('POST', '/orders', '{"sku":"SKU-B","qty":1}');
    const changed = await call('POST', `/orders/${placed.orderId}/qty`, '{"qty":4}');
    assert.equal(changed.status, 200);
    assert.equal(changed.body.seq, 2);
    const cancelled = await call('POST', `/orders/${placed.orderId}/cancel`);
    assert.equal(cancelled.status, 200);
    assert.deepEqual([cancelled.body.status, cancelled.body.eventType, cancelled.body.seq], ['CANCELLED', 'OrderCancelled', 3]);
    const twice = await call('POST', `/orders/${placed.orderId}/cancel`);
    assert.equal(twice.status, 409);
    assert.match(twice.body.error, /already cancelled/);
  });

  it('GET /healthz answers 200', async () => {
    assert.deepEqual(await call('GET', '/healthz').then((r) => [r.status, r.body]), [200, { ok: true }]);
  });

  it('HEAD /healthz answers 200 like GET, with no body', async () => {
    const response = await fetch(`${base}/healthz`, { method: 'HEAD' });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-length'), String(JSON.stringify({ ok: true }).length));
    assert.equal(await response.text(), '');
  });

  it('accepts application/json with a UTF-8 charset parameter', async () => {
    const { status } = await call('POST', '/orders', '{"sku":"SKU-A","qty":1}', 'application/json; charset=UTF-8');
    assert.equal(status, 201);
  });

  const rejected: [string, string, string, string | undefined, number, RegExp, string?][] = [
    ['qty 0', 'POST', '/orders', '{"sku":"SKU-A","qty":0}', 400, /qty must be a whole number/],
    ['qty as a fraction', 'POST', '/orders', '{"sku":"SKU-A","qty":1.5}', 400, /qty must be a whole number/],
    ['qty as a string', 'POST', '/orders', '{"sku":"SKU-A","qty":"2"}', 400, /qty must be a JSON number, got "2"/],
    ['missing sku', 'POST', '/orders', '{"qty":2}', 400, /sku must be/],
    ['unknown field', 'POST', '/orders', '{"sku":"SKU-A","qty":2,"price":9}', 400, /unknown field price; allowed: sku, qty/],
    ['malformed JSON', 'POST', '/orders', '{"sku":', 400, /not valid JSON/],
    ['JSON array', 'POST', '/orders', '[1]', 400, /must be a JSON object/],
    ['not JSON content type', 'POST', '/orders', 'sku=A', 415, /content-type: application\/json/, 'application/x-www-form-urlencoded'],
    ['body too large', 'POST', '/orders', JSON.stringify({ sku: 'SKU-A', qty: 1, pad: 'x'.repeat(2000) }), 413, /larger than 1024 bytes/],
    ['unknown order', 'GET', '/orders/999', undefined, 404, /no order 999/],
    ['unknown order, change', 'POST', '/orders/999/qty', '{"qty":2}', 404, /no order 999/],
    ['bad order id', 'GET', '/orders/abc', undefined, 400, /order id must be a positive whole number/],
    ['unknown route', 'GET', '/nope', undefined, 404, /no route \/nope/],
    ['wrong method', 'GET', '/orders', undefined, 405, /use POST on \/orders/],
    ['bad percent-escape in the order id', 'GET', '/orders/%ZZ', undefined, 400, /"%ZZ" is not a valid percent-encoded path segment/],
    ['qty beyond what a double holds', 'POST', '/orders', '{"sku":"SKU-A","qty":1e400}', 400, /qty must be a whole number from 1 to 1000000, got a number out of range/],
    ['a JSON-like content type', 'POST', '/orders', '{"sku":"SKU-A","qty":1}', 415, /content-type: application\/json/, 'application/json-patch+json'],
    ['a charset other than UTF-8', 'POST', '/orders', '{"sku":"SKU-A","qty":1}', 415, /charset utf-8/, 'application/json; charset=latin1'],
    ['a key twice', 'POST', '/orders', '{"sku":"SKU-A","qty":1,"qty":2}', 400, /duplicate key "qty" in the JSON body/],
    ['a key twice, escaped', 'POST', '/orders', '{"sku":"SKU-A","\\u0071ty":1,"qty":2}', 400, /duplicate key "qty" in the JSON body/],
  ];
  for (const [name, method, path, body, status, message, type] of rejected) {
    it(`${name}: ${status}, nothing written`, async () => {
      const before = rows();
      const response = await call(method, path, body, type);
      assert.equal(response.status, status, JSON.stringify(response.body));
      assert.match(response.body.error, message);
      assert.doesNotMatch(JSON.stringify(response.body), /\n\s+at /);
      assert.deepEqual(rows(), before);
      assert.ok(!logged.some((line) => /"msg":"request failed"/.test(line)), 'an expected error is not logged as a failure');
    });
  }

  it('a body larger than the limit sent without content-length is cut off with 413', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.write('{"sku":"SKU-A","qty":1,"pad":"');
      req.write('x'.repeat(4000));
      req.end('"}');
    });
    assert.equal(status, 413);
  });

  it('a malformed request target is a 400, not logged as a failure (issue 30)', async () => {
    const reply = await raw(`GET http://[ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    assert.match(reply, /^HTTP\/1\.1 400 /);
    assert.match(reply, /malformed request target/);
    assert.ok(!logged.some((line) => /"msg":"request failed"/.test(line)));
  });

  it('a client that aborts mid-body is logged at debug, not as a failure (issue 30)', async () => {
    const lines: string[] = [];
    const api = createOrderApi(createOrderService(db), createLogger('test', (line) => lines.push(line), { level: 'debug' }));
    const own = createServer(api);
    await new Promise<void>((resolve) => own.listen(0, '127.0.0.1', resolve));
    try {
      const socket = connect((own.address() as { port: number }).port, '127.0.0.1');
      const requested = new Promise((resolve) => own.once('request', resolve));
      socket.write('POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"sku":');
      await requested;
      socket.destroy();
      await waitFor(() => lines.some((line) => /"msg":"request aborted by the client"/.test(line)), { message: lines.join('') });
      assert.ok(!lines.some((line) => /"level":"error"/.test(line)), lines.join(''));
    } finally {
      own.close();
    }
  });

  it('idle connections are closed after the idle timeout and capped, so /healthz stays reachable (issue 30)', async () => {
    const own = createServer(createOrderApi(createOrderService(db), createLogger('test', () => {})));
    boundConnections(own, { idleTimeoutMs: 300, maxConnections: 20 });
    await new Promise<void>((resolve) => own.listen(0, '127.0.0.1', resolve));
    const port = (own.address() as { port: number }).port;
    try {
      // 50 clients that connect and send nothing: 20 are held, the rest refused, all closed soon.
      let closed = 0;
      for (let i = 0; i < 50; i += 1) connect(port, '127.0.0.1').on('error', () => {}).once('close', () => (closed += 1));
      await waitFor(() => closed === 50, { timeoutMs: 5000, message: `${closed} of 50 idle connections closed` });
      const health = await fetch(`http://127.0.0.1:${port}/healthz`);
      assert.equal(health.status, 200);
    } finally {
      own.close();
      own.closeAllConnections();
    }
  });

  it('an unexpected error is a 500 without details, and is logged', async () => {
    db.exec('DROP TABLE orders');
    try {
      const response = await call('POST', '/orders', '{"sku":"SKU-A","qty":1}');
      assert.equal(response.status, 500);
      assert.deepEqual(response.body, { error: 'internal error' });
      assert.ok(logged.some((line) => /"msg":"request failed"/.test(line)));
    } finally {
      db.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL, status TEXT NOT NULL DEFAULT 'PLACED')");
    }
  });
});
