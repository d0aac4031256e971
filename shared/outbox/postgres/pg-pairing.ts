import type { Redis } from 'ioredis';
import type { Pool, PoolClient } from 'pg';
import { OutboxError } from '../errors/outbox-error.js';
import { StoreBehindError } from '../errors/store-behind-error.js';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { describeRedis } from '../redis/describe.js';
import { partitionsOf, type Partitions } from '../redis/partitions.js';
import { assertNotBehind, pairPartitions, servedStores, type Pairing, type PairingStore, type StoreHistory } from '../relay/store-pairing.js';
import { PAIRING_LOCK, REPLAY_LOCK } from './locks.js';
import type { Queryable } from './pg-schema.js';
import { pgHasPublished, pgStoreIdOf, pgStoreName } from './pg-store-meta.js';

/** Throws when Redis (any partition) serves a store other than the database's; resolves the store it serves (null: none, in some partition). */
export async function assertPgSameStore(db: Pool, redis: Redis | Partitions): Promise<string | null> {
  const [storeId, database] = await Promise.all([pgStoreIdOf(db), pgStoreName(db)]);
  const served = await servedStores(partitionsOf(redis), storeId, (r, s) => new StoreMismatchError(storeId, s, { database, redis: describeRedis(r) }));
  return served.includes(null) ? null : storeId;
}

/**
 * Sets the PUBLISHED rows of the aggregates `inLost` accepts (all when undefined) back to PENDING and
 * bumps the replay generation, in one transaction that first takes the replay lock EXCLUSIVE: it
 * waits for every relay batch in flight to commit (their marks are then reset too) and holds back
 * new claims until the reset is committed.
 */
async function resetPublished(client: PoolClient, inLost?: (aggregate: string) => boolean): Promise<number> {
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [REPLAY_LOCK]);
    await client.query("UPDATE outbox_meta SET value = (value::bigint + 1)::text WHERE key = 'replay_generation'");
    let reset;
    if (inLost === undefined) {
      reset = await client.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED'");
    } else {
      // The partition function is the relay's (partitions.ts), so the aggregates are picked here.
      const { rows } = await client.query<{ aggregate_id: string }>("SELECT DISTINCT aggregate_id FROM outbox WHERE status = 'PUBLISHED'");
      const lost = rows.map((row) => row.aggregate_id).filter(inLost);
      reset = await client.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED' AND aggregate_id = ANY($1::text[])", [lost]);
    }
    await client.query('COMMIT');
    return reset.rowCount ?? 0;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

function pgPairingStore(client: PoolClient, storeId: string, database: string): PairingStore {
  return {
    storeId,
    hasPublished: () => pgHasPublished(client),
    resetPublished: (inLost) => resetPublished(client, inLost),
    pruned: async () => {
      const { rows } = await client.query<{ aggregate_id: string; through_seq: string; events: string }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned');
      return rows.map((row) => ({ aggregate_id: row.aggregate_id, through_seq: Number(row.through_seq), events: Number(row.events) }));
    },
    recordRebuild: async () => {
      await client.query(
        `INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilds', '1'), ('redis_rebuilt_at', $1)
         ON CONFLICT (key) DO UPDATE SET value = CASE WHEN outbox_meta.key = 'redis_rebuilds' THEN (outbox_meta.value::bigint + 1)::text ELSE excluded.value END`,
        [String(Date.now())],
      );
    },
    refuse: (redis, served) => new StoreMismatchError(storeId, served, { database, redis: describeRedis(redis) }),
  };
}

/** The database's history (see `assertNotBehind`): its rows by id, and what prune deleted. */
export function pgHistory(db: Queryable): StoreHistory {
  return {
    eventOfRow: async (id) => (await db.query<{ event_id: string }>('SELECT event_id FROM outbox WHERE id = $1', [id])).rows[0]?.event_id ?? null,
    prunedThrough: async (aggregate) =>
      Number((await db.query<{ through_seq: string }>('SELECT through_seq FROM outbox_pruned WHERE aggregate_id = $1', [aggregate])).rows[0]?.through_seq ?? 0),
    holds: async (eventId) => (await db.query('SELECT 1 FROM outbox WHERE event_id = $1', [eventId])).rows.length === 1,
    lastSeqs: async (aggregates) =>
      new Map(
        (await db.query<{ aggregate_id: string; last_seq: string }>('SELECT aggregate_id, last_seq FROM outbox_aggregates WHERE aggregate_id = ANY($1)', [aggregates])).rows.map((row) => [
          row.aggregate_id,
          Number(row.last_seq),
        ]),
      ),
    behind: async (redis, found) => {
      const database = await pgStoreName(db);
      return new StoreBehindError(found(database), { database, redis: describeRedis(redis) });
    },
  };
}

/**
 * Makes sure Redis (every partition) serves the store before a relay pushes, as `ensurePaired` does
 * for SQLite: claims it on first use, rebuilds the partitions that lost their state. Of several
 * relays, one pairs at a time (a session advisory lock on a connection of its own, closed afterwards
 * so the lock can never stay behind in the pool); the others then find Redis paired.
 */
export async function ensurePgPaired(pool: Pool, redis: Redis | Partitions, storeId: string): Promise<Pairing> {
  const partitions = partitionsOf(redis);
  const served = await assertPgSameStore(pool, partitions);
  await assertNotBehind(partitions, pgHistory(pool));
  if (served !== null) return { kind: 'paired' };
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PAIRING_LOCK]);
    // The tables recreated since the caller read the store id: claiming for the old one would have
    // Redis serve a store that no longer exists, and the new rows pushed as its events.
    const now = await pgStoreIdOf(client);
    if (now !== storeId) throw new OutboxError(`the outbox tables were recreated (store ${storeId}, now ${now}) while pairing: pair again for the new store`, 5);
    return await pairPartitions(pgPairingStore(client, storeId, await pgStoreName(client)), partitions);
  } finally {
    // Destroyed, not returned: that ends the session and its advisory lock with it.
    client.release(true);
  }
}
