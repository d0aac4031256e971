import { createPgOrderService, recreatePgLabSchema } from '../../lab/orders/pg-order-service.js';
import type { BenchDatabase } from './bench-database.js';
import { machineIdle, processCpuMs } from './cpu-time.js';
import { median, timed, type Rate } from './measure.js';
import { progress } from './progress.js';

/** CPU time per transaction of a (median) run, µs: this process (the writers), and the PostgreSQL server processes of their sessions. */
export interface ProducerCpu {
  clientUs: number;
  postgresUs: number;
  /** The share of the whole machine's CPU that stayed idle during the run (0-1): other work on it counts too. */
  machineIdle: number;
}

export interface PgProducerFigures {
  /** Transactions/s of one writer loop on one connection. */
  oneConnection: Rate;
  /** Transactions/s of eight writer loops, each on its own connection, the same total work. */
  eightConnections: Rate;
  oneConnectionCpu: ProducerCpu;
  eightConnectionsCpu: ProducerCpu;
  /** The server's commit durability, as measured under (SHOW synchronous_commit, fsync). */
  synchronousCommit: string;
  fsync: string;
}

/**
 * `transactions` lab-order transactions (createPgOrderService: each placeOrder and each changeQty
 * is one transaction with its outbox row) split evenly over `writers` async loops, each on its own
 * connection: half its share places orders, the other half changes their qty in turn (on its own
 * orders: no writer waits on another's row lock).
 */
async function writeOrders(db: BenchDatabase, writers: number, transactions: number, tick: (n: number) => void): Promise<{ rate: Rate; cpu: ProducerCpu }> {
  const pool = await db.pool(writers);
  try {
    await recreatePgLabSchema(pool);
    const service = await createPgOrderService(pool);
    const shares = Array.from({ length: writers }, (_, w) => Math.floor(transactions / writers) + (w < transactions % writers ? 1 : 0));
    const [client, server] = [processCpuMs(), await db.cpuMs()];
    const idle = machineIdle();
    const rate = await timed(transactions, () =>
      Promise.all(
        shares.map(async (share) => {
          const orders: { id: number; qty: number }[] = [];
          const placed = Math.max(1, Math.ceil(share / 2));
          for (let i = 0; i < share; i += 1) {
            if (i < placed) {
              const { order } = await service.placeOrder({ sku: `SKU-${i % 50}`, qty: 1 + (i % 5) });
              orders.push({ id: order.id, qty: order.qty });
            } else {
              const order = orders[(i - placed) % orders.length];
              order.qty += 1;
              await service.changeQty(order.id, order.qty);
            }
            tick(1);
          }
        }),
      ),
    );
    const cpu = { machineIdle: idle(), clientUs: ((processCpuMs() - client) * 1000) / transactions, postgresUs: (((await db.cpuMs()) - server) * 1000) / transactions };
    return { rate, cpu };
  } finally {
    await pool.end();
  }
}

/**
 * The PostgreSQL producer with 1 and with 8 connections, `rounds` rounds in alternating order
 * (1 then 8, 8 then 1, ...): median of each. Every run starts on freshly created tables.
 */
export async function benchPgProducer(db: BenchDatabase, transactions: number, rounds: number): Promise<PgProducerFigures> {
  const bar = progress('scale-out: PostgreSQL producer', rounds * 2 * transactions);
  const runs: Record<1 | 8, { rate: Rate; cpu: ProducerCpu }[]> = { 1: [], 8: [] };
  for (let round = 0; round < rounds; round += 1) {
    for (const writers of round % 2 === 0 ? ([1, 8] as const) : ([8, 1] as const)) {
      runs[writers].push(await writeOrders(db, writers, transactions, (n) => bar.tick(n)));
    }
  }
  bar.finish();
  const pool = await db.pool(1);
  try {
    const show = async (name: string) => String((await pool.query(`SHOW ${name}`)).rows[0][name]);
    const middle = (writers: 1 | 8) => {
      const rate = median(runs[writers].map((run) => run.rate));
      return { rate, cpu: runs[writers].find((run) => run.rate === rate)!.cpu };
    };
    const [one, eight] = [middle(1), middle(8)];
    return { oneConnection: one.rate, eightConnections: eight.rate, oneConnectionCpu: one.cpu, eightConnectionsCpu: eight.cpu, synchronousCommit: await show('synchronous_commit'), fsync: await show('fsync') };
  } finally {
    await pool.end();
  }
}
