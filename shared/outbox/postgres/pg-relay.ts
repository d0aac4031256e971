import type { Redis } from 'ioredis';
import type { Pool, PoolClient, QueryResult } from 'pg';
import { crashPoint } from '../crash-point.js';
import { OutboxError } from '../errors/outbox-error.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { pushRows } from '../relay/push-rows.js';
import { DEFAULT_RELAY_BATCH_SIZE, type RelayAllOptions, type RelayBatch, type RelayOptions } from '../relay/relay.js';
import type { Pairing } from '../relay/store-pairing.js';
import { toMessage, type OutboxRow } from '../store/events.js';
import { REPLAY_LOCK } from './locks.js';
import { fromPgRow, type PgOutboxRow } from './pg-rows.js';
import { pgReason } from './pg-errors.js';
import { ensurePgPaired } from './pg-pairing.js';
import { pgStoreIdOf, pgStoreName } from './pg-store-meta.js';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { describeRedis } from '../redis/describe.js';

export interface PgRelayOptions extends Pick<RelayOptions, 'batchSize' | 'onPairing'> {
  /**
   * How long a claimed batch may sit in its transaction waiting for Redis, ms: PostgreSQL then ends
   * the session (idle_in_transaction_session_timeout), its row locks go, and another relay pushes
   * the rows again. Bounds how long a stuck relay holds rows back. Default 60000.
   */
  claimTimeoutMs?: number;
}

/**
 * Redis lost its state between two pushes, or the outbox tables were recreated under the relay (a
 * new store id): the pass stops and the relay pairs again, for the store the tables hold now.
 */
class StateLostError extends Error {}

function whole(name: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) throw new OutboxError(`relay ${name} must be an integer from 1 to ${max}, got ${value}`, 2);
  return value;
}

/**
 * The relay on PostgreSQL. Each batch is one transaction: claim the lowest PENDING ids that no other
 * relay holds (FOR UPDATE SKIP LOCKED), push them with the push script, mark them PUBLISHED, commit.
 * Any number of relays run at once, each on its own rows. A claim always starts from the lowest
 * PENDING id (there is no cursor): a row whose producer commits late, behind higher ids, is claimed
 * by the next batch of any relay. A relay that dies between push and commit leaves its rows PENDING
 * (PostgreSQL rolls its transaction back when the session ends): they are pushed again, a duplicate
 * the consumer's dedupe absorbs, never a loss.
 */
export function createPgRelay(pool: Pool, redis: Redis | Partitions, options: PgRelayOptions = {}) {
  const partitions = partitionsOf(redis);
  const batchSize = whole('batch size', options.batchSize ?? DEFAULT_RELAY_BATCH_SIZE, 100_000);
  const claimTimeoutMs = whole('claim timeout', options.claimTimeoutMs ?? 60_000, 2 ** 31 - 1);
  // Simple-query protocol, one round trip: the integers are checked above, the lock key is a constant.
  const claim =
    `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${claimTimeoutMs}; SELECT pg_advisory_xact_lock_shared(${REPLAY_LOCK});` +
    ` SELECT id, event_id, aggregate_id, seq, event_type, payload, created_at, prev_created_at FROM outbox WHERE status = 'PENDING' ORDER BY id LIMIT ${batchSize} FOR UPDATE SKIP LOCKED;` +
    // In the same snapshot as the rows: a relay never pushes rows of recreated tables as its old store's.
    " SELECT value AS store FROM outbox_meta WHERE key = 'store_id'";
  let storeId: string | undefined;
  let paired = false;

  async function push(client: PoolClient, rows: OutboxRow[], store: string): Promise<number> {
    const result = await pushRows(partitions, store, rows.map((row) => ({ id: row.id, aggregate_id: row.aggregate_id, message: toMessage(row, store) })));
    if (result.status === 'unclaimed') throw new StateLostError();
    if (result.status === 'foreign') throw new StoreMismatchError(store, result.servedStore, { database: await pgStoreName(client), redis: describeRedis(result.redis) });
    crashPoint('relay.after-push', () => `crash point relay.after-push: pushed rows ${rows[0].id}-${rows[rows.length - 1].id}, dying before marking them PUBLISHED`);
    return result.pushedAt;
  }

  /** Claims, pushes, marks and commits one batch; resolves undefined when no unclaimed row is PENDING. */
  async function relayBatch(store: string): Promise<RelayBatch | undefined> {
    const started = performance.now();
    const client = await pool.connect().catch((error) => {
      throw new OutboxError(`cannot relay outbox rows in PostgreSQL: ${pgReason(error)}`, 5);
    });
    // A session PostgreSQL ends while the batch waits on Redis emits 'error' outside any query:
    // kept, it is the reason the next query fails.
    let ended: Error | undefined;
    const onError = (error: Error) => (ended ??= error);
    client.on('error', onError);
    let broken = false;
    try {
      const results = (await client.query(claim)) as unknown as QueryResult<PgOutboxRow>[];
      if ((results[4].rows[0] as unknown as { store?: string } | undefined)?.store !== store) throw new StateLostError();
      const rows: OutboxRow[] = results[3].rows.map(fromPgRow);
      if (rows.length === 0) {
        await client.query('COMMIT');
        return undefined;
      }
      const pushedAt = await push(client, rows, store);
      await client.query(`UPDATE outbox SET status = 'PUBLISHED', published_at = ${pushedAt} WHERE id = ANY('{${rows.map((row) => row.id).join(',')}}'::bigint[])`);
      crashPoint('relay.mid-batch', () => `crash point relay.mid-batch: dying with rows ${rows[0].id}-${rows[rows.length - 1].id} marked, uncommitted`);
      await client.query('COMMIT');
      return { count: rows.length, firstId: rows[0].id, lastId: rows[rows.length - 1].id, durationMs: performance.now() - started };
    } catch (error) {
      broken = true;
      await client.query('ROLLBACK').catch(() => {});
      if (error instanceof OutboxError || error instanceof StateLostError) throw error;
      const cause = ended ?? error;
      const timedOut = (cause as { code?: string }).code === '25P03' ? ` (the batch waited on Redis longer than the claim timeout, ${claimTimeoutMs} ms: its rows stay PENDING)` : '';
      throw new OutboxError(`cannot relay outbox rows in PostgreSQL: ${pgReason(cause)}${timedOut}`, 5);
    } finally {
      client.off('error', onError);
      // A connection that failed mid-batch is closed rather than handed back in an unknown state.
      client.release(broken);
    }
  }

  /** Checks that Redis serves this store, claiming or rebuilding it as `ensurePaired` does. */
  async function pair(): Promise<Pairing> {
    const pairing = await (async () => {
      // Read each time: the tables may have been recreated (a new store) since the last pairing.
      storeId = await pgStoreIdOf(pool);
      return ensurePgPaired(pool, partitions, storeId);
    })().catch((error) => {
      throw error instanceof OutboxError ? error : new OutboxError(`cannot pair the relay with Redis: ${pgReason(error)}`, 5);
    });
    paired = true;
    if (pairing.kind !== 'paired') options.onPairing?.(pairing);
    return pairing;
  }

  /**
   * Relays batch after batch until no unclaimed row is PENDING (rows other relays hold are theirs)
   * or `deadline` passed. When a push finds that Redis lost its state, pairs again (rebuilding it)
   * and goes on.
   */
  async function relayAll({ onBatch, deadline = Infinity }: Pick<RelayAllOptions, 'onBatch' | 'deadline'> = {}): Promise<{ batches: number; events: number }> {
    const total = { batches: 0, events: 0 };
    for (let attempt = 1; ; attempt += 1) {
      if (!paired) await pair();
      try {
        while (Date.now() < deadline) {
          const batch = await relayBatch(storeId!);
          if (!batch) break;
          total.batches += 1;
          total.events += batch.count;
          onBatch?.(batch);
        }
        return total;
      } catch (error) {
        if (!(error instanceof StateLostError)) throw error;
        if (attempt === 3) throw new OutboxError('Redis keeps losing its state while the relay rebuilds it: check its persistence and maxmemory-policy', 5);
        paired = false;
      }
    }
  }

  return { relayAll, pair };
}

export type PgRelay = ReturnType<typeof createPgRelay>;
