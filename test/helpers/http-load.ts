export interface LoadResult {
  /** Requests answered with the expected status. */
  accepted: number;
  /** Requests answered otherwise or not at all, with what happened. */
  failures: string[];
  orderIds: number[];
}

async function post(base: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${path}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/**
 * Real order traffic over HTTP for a bounded time: `workers` loops, each placing an order, changing
 * its quantity at once and cancelling every third one, so most orders get several events within a
 * few milliseconds.
 */
export async function runLoad(port: number, { durationMs, workers = 8 }: { durationMs: number; workers?: number }): Promise<LoadResult> {
  const base = `http://127.0.0.1:${port}`;
  const result: LoadResult = { accepted: 0, failures: [], orderIds: [] };
  const deadline = Date.now() + durationMs;
  const expect = async (request: Promise<Response>, status: number) => {
    try {
      const response = await request;
      const body = (await response.json()) as { orderId?: number };
      if (response.status === status) {
        result.accepted += 1;
        return body;
      }
      result.failures.push(`${response.status} ${JSON.stringify(body)}`);
    } catch (error) {
      result.failures.push((error as Error).message);
    }
    return undefined;
  };
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      for (let i = 0; Date.now() < deadline; i += 1) {
        const placed = await expect(post(base, '/orders', { sku: `SKU-${(worker + i) % 5}`, qty: 1 + (i % 4) }), 201);
        if (!placed?.orderId) continue;
        result.orderIds.push(placed.orderId);
        await expect(post(base, `/orders/${placed.orderId}/qty`, { qty: 7 }), 200);
        if (i % 3 === 0) await expect(post(base, `/orders/${placed.orderId}/cancel`), 200);
      }
    }),
  );
  return result;
}
