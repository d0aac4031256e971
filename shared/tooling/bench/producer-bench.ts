import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { openDatabase } from '../../outbox/store/open-database.js';
import { createDatabase } from '../../lab/init-stores.js';
import { createOrderService } from '../../lab/orders/order-service.js';
import { median, timed, type Rate } from './measure.js';
import { processCpuMs } from './cpu-time.js';
import { progress } from './progress.js';

export interface ProducerFigures {
  /** The order service: order + OrderPlaced in one IMMEDIATE transaction each. */
  perTransaction: Rate;
  /** Raw better-sqlite3: the same statements (order, seq, event) per IMMEDIATE transaction, nothing else. */
  rawPerTransaction: Rate;
  /** The batch API: 1000 orders per transaction. */
  batch: Rate;
  /** CPU time of this process per order (one order, one event) in the order service's rounds: one per transaction, and the batch API. */
  cpu: { perTransactionUs: number; batchUs: number };
}

const ROUNDS = 3;

/** Each round writes into a fresh database, so table growth does not favour either side. */
function freshDb(workspace: string, name: string) {
  const dir = join(workspace, name);
  createDatabase(dir);
  return openDatabase(dir);
}

export async function benchProducer(workspace: string, orders: number): Promise<ProducerFigures> {
  const bar = progress('producer: one order per transaction', ROUNDS * 3 * orders);
  const ours: Rate[] = [];
  const raw: Rate[] = [];
  const batch: Rate[] = [];
  const cpu = { perTransactionMs: 0, batchMs: 0 };
  for (let round = 0; round < ROUNDS; round += 1) {
    const rawDb = freshDb(workspace, `raw-${round}`);
    const insertOrder = rawDb.prepare('INSERT INTO orders (sku, qty) VALUES (?, ?)');
    const nextSeq = rawDb
      .prepare('INSERT INTO outbox_aggregates (aggregate_id, last_seq) VALUES (?, 1) ON CONFLICT (aggregate_id) DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq')
      .pluck();
    const insertEvent = rawDb.prepare('INSERT INTO outbox (event_id, aggregate_id, seq, event_type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)');
    const rawTx = rawDb.transaction((sku: string, qty: number) => {
      const id = Number(insertOrder.run(sku, qty).lastInsertRowid);
      const key = `order:${id}`;
      insertEvent.run(randomUUID(), key, nextSeq.get(key), 'OrderPlaced', JSON.stringify({ orderId: id, sku, qty }), Date.now());
    });
    raw.push(await timed(orders, () => {
      for (let i = 0; i < orders; i += 1) rawTx.immediate('SKU-1', 1 + (i % 5));
    }));
    bar.tick(orders);
    rawDb.close();

    const db = freshDb(workspace, `ours-${round}`);
    const service = createOrderService(db);
    let cpuBefore = processCpuMs();
    ours.push(await timed(orders, () => {
      for (let i = 0; i < orders; i += 1) service.placeOrder({ sku: 'SKU-1', qty: 1 + (i % 5) });
    }));
    cpu.perTransactionMs += processCpuMs() - cpuBefore;
    bar.tick(orders);
    db.close();

    const batchDb = freshDb(workspace, `batch-${round}`);
    const batchService = createOrderService(batchDb);
    const chunk = Array.from({ length: 1000 }, (_, i) => ({ sku: 'SKU-1', qty: 1 + (i % 5) }));
    cpuBefore = processCpuMs();
    batch.push(await timed(orders, () => {
      for (let i = 0; i < orders; i += 1000) batchService.placeOrders(chunk.slice(0, Math.min(1000, orders - i)));
    }));
    cpu.batchMs += processCpuMs() - cpuBefore;
    bar.tick(orders);
    batchDb.close();
  }
  bar.finish();
  const perOrder = (ms: number) => (ms * 1000) / (ROUNDS * orders);
  return { perTransaction: median(ours), rawPerTransaction: median(raw), batch: median(batch), cpu: { perTransactionUs: perOrder(cpu.perTransactionMs), batchUs: perOrder(cpu.batchMs) } };
}
