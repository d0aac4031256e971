import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createPgLabSchema, createPgOrderService } from '../../lab/orders/pg-order-service.js';
import { seededRandom } from '../../lab/random.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../../outbox/redis/connect-partitions.js';
import { keys } from '../../outbox/redis/keys.js';
import type { Partitions } from '../../outbox/redis/partitions.js';
import { sleep } from '../../outbox/sleep.js';
import { ConflictError } from '../../outbox/errors/conflict-error.js';
import { Pm2 } from '../local/pm2.js';
import { startRedisCluster } from '../local/redis-cluster.js';
import { freePort } from '../local/redis-server.js';
import { waitFor } from '../local/wait-for.js';
import { ledgerHolds, partitionLedger, type PartitionLedger } from './partition-ledger.js';
import type { ScaleOutTarget } from './targets.js';


export interface ScaleOutChaosOptions {
  /** How long faults are injected while traffic runs (ms). */
  durationMs: number;
  /** Order operations per second, over all the writers. */
  rate: number;
  /** Mean time between faults (ms); each wait is drawn from 0.5x to 1.5x of it. */
  killEveryMs: number;
  targets: ScaleOutTarget[];
  seed: number;
  /** A PostgreSQL server (any database on it): the run creates a database of its own there and drops it afterwards. */
  serverUrl: string;
  /** Default 4. */
  partitions?: number;
  /** Relay apps (pm2 instances). Default 4. */
  relays?: number;
  /** Consumer apps (pm2 instances). Default 3. */
  consumers?: number;
  /** How long the system may take to drain after traffic stops (ms). Default 60000. */
  drainTimeoutMs?: number;
  keep?: boolean;
  progress?: (line: string) => void;
}

export interface ScaleOutChaosResult {
  seed: number;
  durationMs: number;
  rate: number;
  partitions: number;
  relays: number;
  consumers: number;
  /** Faults that took effect, by kind: "kill relay", "kill consumer", "cluster node restarted", "cluster node wiped". */
  faults: Record<string, number>;
  orders: number;
  ledger: PartitionLedger;
  /** Messages pushed over every partition, duplicates included (a wiped node's counts are lost with it). */
  enqueued: number;
  duplicatesAbsorbed: number;
  drainMs: number | null;
  ok: boolean;
  workspace: string;
}

const APP = { relay: 'outbox-relay', consumer: 'outbox-consumer' } as const;

/** Lease of the consumers in a run: short, so that a killed consumer's partitions move within a couple of seconds. */
const CHAOS_PARTITION_LEASE = '2s';

/**
 * Chaos on the scale-out path: the PostgreSQL store (a database of the run's own), a private
 * 3-master Redis Cluster, `relays` relay apps and `consumers` consumer apps under pm2 sharing
 * `partitions` partitions, traffic from four connections, and seeded faults: a relay or a consumer
 * SIGKILLed (pm2 starts it again), a cluster node restarted with its data, or restarted having lost
 * it (its partitions are rebuilt from PostgreSQL). Then traffic stops, the system drains, and the
 * ledger is read: every event applied once, in seq order per aggregate, nothing dead or parked.
 */
export async function runScaleOutChaos(options: ScaleOutChaosOptions): Promise<ScaleOutChaosResult> {
  const progress = options.progress ?? (() => {});
  const random = seededRandom(options.seed);
  const partitionCount = options.partitions ?? 4;
  const relays = options.relays ?? 4;
  const consumers = options.consumers ?? 3;
  const workspace = mkdtempSync(join(tmpdir(), 'outbox-chaos-'));
  const name = `outbox_chaos_${process.pid}_${Math.floor(random() * 1e9)}`;
  const serverUrl = new URL(options.serverUrl);
  const databaseUrl = new URL(options.serverUrl);
  databaseUrl.pathname = `/${name}`;
  const admin = new pg.Pool({ connectionString: serverUrl.toString(), max: 1 });
  admin.on('error', () => {});
  await admin.query(`CREATE DATABASE ${name}`);
  const pool = new pg.Pool({ connectionString: databaseUrl.toString(), max: 6 });
  pool.on('error', () => {});
  const cluster = await startRedisCluster();
  const target = { redisUrl: '', redisCluster: cluster.nodes.join(','), partitions: partitionCount };
  let partitions: Partitions | undefined;
  const pm2 = new Pm2({
    OUTBOX_DIR: join(workspace, 'data'),
    OUTBOX_LOG_DIR: join(workspace, 'logs'),
    PORT: String(await freePort()),
    OUTBOX_DATABASE_URL: databaseUrl.toString(),
    OUTBOX_REDIS_CLUSTER: target.redisCluster,
    OUTBOX_PARTITIONS: String(partitionCount),
    OUTBOX_PARTITION_LEASE: CHAOS_PARTITION_LEASE,
    OUTBOX_RELAY_INSTANCES: String(relays),
    OUTBOX_CONSUMER_INSTANCES: String(consumers),
    OUTBOX_HANDLER_THREADS: '1',
  });
  const faults: Record<string, number> = {};
  const count = (kind: string) => (faults[kind] = (faults[kind] ?? 0) + 1);
  try {
    await createPgLabSchema(pool);
    partitions = await connectTargetPartitions(target, (o) => connectTarget(target, { ...o, reconnect: true, name: 'outbox-chaos' }));
    const started = await pm2.run('start', 'ecosystem.config.cjs');
    if (started.code !== 0) throw new Error(`pm2 start failed: ${started.stderr || started.stdout}`);
    await waitFor(async () => (await pm2.list()).filter((p) => p.pm2_env.status === 'online').length === 1 + relays + consumers, {
      timeoutMs: 30_000,
      message: 'the apps did not come online',
    });

    const stop = new AbortController();
    const writing = traffic(pool, options.rate, options.seed, stop.signal);
    const startedAt = Date.now();
    const nextTarget = deck(options.targets, random);
    const pickProcess = async (app: keyof typeof APP) => {
      const online = (await pm2.list()).filter((p) => p.name === APP[app] && p.pm2_env.status === 'online' && p.pid);
      return online[Math.floor(random() * online.length)];
    };
    const sampler = setInterval(() => {
      void (async () => {
        const rows = Number((await pool.query('SELECT COUNT(*) AS n FROM outbox')).rows[0].n);
        const applied = (await Promise.all(partitions!.clients.map((r) => r.hlen(keys.processed).catch(() => 0)))).reduce((a, b) => a + b, 0);
        progress(`chaos ${Math.round((Date.now() - startedAt) / 1000)}s/${Math.round(options.durationMs / 1000)}s  faults ${Object.values(faults).reduce((a, b) => a + b, 0)}  outbox rows ${rows}  applied ${applied}`);
      })().catch(() => {});
    }, 1000);
    try {
      while (Date.now() - startedAt < options.durationMs) {
        await sleep(options.killEveryMs * (0.5 + random()));
        if (Date.now() - startedAt >= options.durationMs) break;
        const drawn = nextTarget.deal();
        if (drawn === 'cluster-node' || drawn === 'cluster-node-wipe') {
          const node = Math.floor(random() * cluster.nodes.length);
          await cluster.restart(node, { wipe: drawn === 'cluster-node-wipe' });
          count(drawn === 'cluster-node' ? 'cluster node restarted' : 'cluster node wiped');
          continue;
        }
        const victim = await pickProcess(drawn);
        if (!victim) {
          // None online (all being restarted): the target stays due.
          nextTarget.putBack(drawn);
          continue;
        }
        process.kill(victim.pid, 'SIGKILL');
        count(`kill ${drawn}`);
      }
    } finally {
      clearInterval(sampler);
      stop.abort();
      await writing;
    }

    progress('chaos: traffic stopped, draining');
    const drainStarted = Date.now();
    const rows = async () => (await pool.query<{ event_id: string; aggregate_id: string; seq: string }>('SELECT event_id, aggregate_id, seq FROM outbox')).rows;
    let ledger = await partitionLedger(await rows(), partitions);
    let drainMs: number | null = null;
    while (Date.now() - drainStarted < (options.drainTimeoutMs ?? 60_000)) {
      ledger = await partitionLedger(await rows(), partitions);
      if (ledgerHolds(ledger)) {
        drainMs = Date.now() - drainStarted;
        break;
      }
      await sleep(500);
    }
    const counts = await Promise.all(partitions.clients.map(async (r) => ({ enqueued: Number((await r.get(keys.enqueued)) ?? 0), duplicates: Number((await r.hget(keys.stats, 'duplicates')) ?? 0) })));
    return {
      seed: options.seed,
      durationMs: options.durationMs,
      rate: options.rate,
      partitions: partitionCount,
      relays,
      consumers,
      faults,
      orders: Number((await pool.query('SELECT COUNT(*) AS n FROM orders')).rows[0].n),
      ledger,
      enqueued: counts.reduce((n, c) => n + c.enqueued, 0),
      duplicatesAbsorbed: counts.reduce((n, c) => n + c.duplicates, 0),
      drainMs,
      // A run that wrote nothing proves nothing.
      ok: drainMs !== null && ledger.events > 0,
      workspace,
    };
  } finally {
    await pm2.kill();
    if (partitions) await closePartitions(partitions);
    await cluster.stop();
    await pool.end().catch(() => {});
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await admin.end().catch(() => {});
    if (!options.keep) rmSync(workspace, { recursive: true, force: true });
  }
}

/**
 * Order traffic at `rate` operations per second from four connections: each writer places an
 * order now and then and changes the quantity of its recent ones, so aggregates get many events.
 */
async function traffic(pool: pg.Pool, rate: number, seed: number, signal: AbortSignal): Promise<void> {
  const service = await createPgOrderService(pool);
  const writers = 4;
  const everyMs = (1000 * writers) / rate;
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      const random = seededRandom(seed * 31 + w);
      const ids: number[] = [];
      let next = Date.now();
      while (!signal.aborted) {
        try {
          if (ids.length < 5 || random() < 0.1) {
            ids.push((await service.placeOrder({ sku: `SKU-${Math.floor(random() * 5)}`, qty: 1 + Math.floor(random() * 3) })).order.id);
          } else {
            const id = ids[Math.floor(random() * Math.min(ids.length, 20)) + Math.max(0, ids.length - 20)];
            const order = await service.getOrder(id);
            if (order && order.status !== 'CANCELLED') await service.changeQty(id, 1 + Math.floor(random() * 9));
          }
        } catch (error) {
          // A refused change (a conflict) is the lab's answer, not a fault; anything else ends the run.
          if (!(error instanceof ConflictError)) throw error;
        }
        next += everyMs;
        const wait = next - Date.now();
        if (wait > 0) await sleep(wait, signal).catch(() => {});
        else next = Date.now();
      }
    }),
  );
}

/**
 * Deals the targets as from a deck, shuffled by `random` and dealt in full before it is shuffled
 * again: the first `targets.length` faults of a run hit every target once, and so does each
 * following round of as many (on a loaded machine fewer faults fit in a run, and independent
 * draws could miss one), still in a seeded order. A card put back is dealt next.
 */
export function deck<T>(targets: readonly T[], random: () => number) {
  let cards: T[] = [];
  return {
    deal(): T {
      if (cards.length === 0) {
        cards = [...targets];
        for (let i = cards.length - 1; i > 0; i -= 1) {
          const j = Math.floor(random() * (i + 1));
          [cards[i], cards[j]] = [cards[j], cards[i]];
        }
      }
      return cards.pop()!;
    },
    putBack(card: T): void {
      cards.push(card);
    },
  };
}
