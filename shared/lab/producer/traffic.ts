import { StoreUnavailableError } from '../../outbox/errors/store-unavailable-error.js';
import type { Logger } from '../../outbox/logger.js';
import type { OrderApiService } from './http-api.js';
import { seededRandom } from '../random.js';

export interface TrafficOptions {
  /** Operations per second. */
  rate: number;
  /** Stop after this many ms; 0 runs until `stop()`. Default 0. */
  durationMs?: number;
  /** Share of operations that change a live order's quantity. Default 0.2. */
  changeShare?: number;
  /** Share of operations that cancel a live order. Default 0.1. The rest place orders. */
  cancelShare?: number;
  /** Share of placed orders whose quantity is changed at once, in the same millisecond. Default 0.3. */
  burstShare?: number;
  /** Number of distinct SKUs. Default 20. */
  skus?: number;
  /** Seed of the random choices. Default 1. */
  seed?: number;
}

export interface TrafficStats {
  placed: number;
  changed: number;
  cancelled: number;
  failed: number;
}

const TICK_MS = 10;
const MAX_LIVE = 10_000;

/**
 * Generates order traffic in this process at a steady rate: a mix of place / change-qty / cancel,
 * some orders getting several events within the same millisecond (which a timestamp cannot order).
 * `service` is the SQLite order service (synchronous) or the PostgreSQL one (each write a pg
 * transaction): operations run one after the other, each awaited, so a change follows its place;
 * a tick that finds the previous one still running leaves the operations due to the next.
 */
export function startTraffic(service: OrderApiService, options: TrafficOptions, log: Logger) {
  const random = seededRandom(options.seed ?? 1);
  const changeShare = options.changeShare ?? 0.2;
  const cancelShare = options.cancelShare ?? 0.1;
  const burstShare = options.burstShare ?? 0.3;
  const skus = options.skus ?? 20;
  const stats: TrafficStats = { placed: 0, changed: 0, cancelled: 0, failed: 0 };
  const live: number[] = [];
  const started = performance.now();
  let operations = 0;
  let resolveDone: (stats: TrafficStats) => void;
  const done = new Promise<TrafficStats>((resolve) => (resolveDone = resolve));

  const qty = () => 1 + Math.floor(random() * 9);
  const pickLive = (remove: boolean) => {
    const index = Math.floor(random() * live.length);
    const id = live[index];
    if (remove) live.splice(index, 1);
    return id;
  };

  async function place(): Promise<void> {
    const { order } = await service.placeOrder({ sku: `SKU-${Math.floor(random() * skus)}`, qty: qty() });
    stats.placed += 1;
    live.push(order.id);
    if (live.length > MAX_LIVE) live.shift();
    if (random() < burstShare) {
      await service.changeQty(order.id, order.qty === 1 ? 2 : 1);
      stats.changed += 1;
    }
  }

  async function operate(): Promise<void> {
    const roll = random();
    if (live.length > 0 && roll < cancelShare) {
      await service.cancelOrder(pickLive(true));
      stats.cancelled += 1;
    } else if (live.length > 0 && roll < cancelShare + changeShare) {
      const id = pickLive(false);
      const current = await service.getOrder(id);
      if (current?.status === 'PLACED') {
        await service.changeQty(id, current.qty === 1 ? 2 : current.qty - 1);
        stats.changed += 1;
      }
    } else {
      await place();
    }
  }

  let lastWarn = 0;
  let ticking: Promise<void> | undefined;
  let finished = false;
  const timer = setInterval(() => {
    ticking ??= tick().finally(() => (ticking = undefined));
  }, TICK_MS);

  async function tick(): Promise<void> {
    const elapsed = performance.now() - started;
    if (options.durationMs && elapsed >= options.durationMs) return finish();
    const due = Math.floor((options.rate * elapsed) / 1000) - operations;
    for (let i = 0; i < due && !finished; i += 1) {
      operations += 1;
      try {
        await operate();
      } catch (error) {
        stats.failed += 1;
        // No live app.db (the producer logged why once): the orders it knew are not in the next one.
        if (error instanceof StoreUnavailableError) live.length = 0;
        else if (Date.now() - lastWarn > 1000) {
          lastWarn = Date.now();
          log.warn('traffic operation failed', { error: (error as Error).message, failed: stats.failed });
        }
      }
    }
  }

  function finish(): void {
    finished = true;
    clearInterval(timer);
    // Resolved once the operation under way (if any) is done: stop() then closes nothing it still uses.
    void (ticking ?? Promise.resolve()).then(() => resolveDone(stats));
  }

  return {
    stats,
    /** Resolves when `durationMs` has passed or `stop()` was called. */
    done,
    stop(): Promise<TrafficStats> {
      finish();
      return done;
    },
  };
}
