import type { Redis } from 'ioredis';
import type { Pool, PoolClient } from 'pg';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { describeRedis } from '../redis/describe.js';
import { keys } from '../redis/keys.js';
import { scanKeys, unlinkAll } from '../redis/scan-keys.js';
import { claimStore } from '../redis/scripts.js';
import type { Pairing } from '../relay/store-pairing.js';
import { PAIRING_LOCK, REPLAY_LOCK } from './locks.js';
import { pgHasPublished, pgStoreIdOf, pgStoreName } from './pg-store-meta.js';

async function mismatch(db: PoolClient | Pool, redis: Redis, storeId: string, served: string): Promise<StoreMismatchError> {
  return new StoreMismatchError(storeId, served, { database: await pgStoreName(db), redis: describeRedis(redis) });
}

/** Throws when Redis serves another store; resolves true when it serves this one, false when none. */
async function servesThisStore(db: PoolClient | Pool, redis: Redis, storeId: string): Promise<boolean> {
  const served = await redis.hget(keys.meta, 'store');
  if (served !== null && served !== storeId) throw await mismatch(db, redis, storeId, served);
  return served === storeId;
}

/** Throws when Redis serves a store other than the database's; resolves the store it serves (null: none). */
export async function assertPgSameStore(db: Pool, redis: Redis): Promise<string | null> {
  const storeId = await pgStoreIdOf(db);
  await servesThisStore(db, redis, storeId);
  return redis.hget(keys.meta, 'store');
}

/**
 * Sets every PUBLISHED row back to PENDING and bumps the replay generation, in one transaction that
 * first takes the replay lock EXCLUSIVE: it waits for every relay batch in flight to commit (their
 * marks are then reset too) and holds back new claims until the reset is committed.
 */
async function resetPublished(client: PoolClient): Promise<number> {
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [REPLAY_LOCK]);
    await client.query("UPDATE outbox_meta SET value = (value::bigint + 1)::text WHERE key = 'replay_generation'");
    const reset = await client.query("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE status = 'PUBLISHED'");
    await client.query('COMMIT');
    return reset.rowCount ?? 0;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

async function pairLocked(client: PoolClient, redis: Redis, storeId: string): Promise<Pairing> {
  if (await servesThisStore(client, redis, storeId)) return { kind: 'paired' };
  // No consumer applies while Redis serves no store: a marker left without its effect would skip the event.
  await unlinkAll(redis, scanKeys(redis, keys.seen('*')));
  if (!(await pgHasPublished(client))) {
    const { servedStore } = await claimStore(redis, storeId);
    if (servedStore !== storeId) throw await mismatch(client, redis, storeId, servedStore);
    return { kind: 'claimed' };
  }
  // Committed before the claim: a crash in between repeats the rebuild, it never claims an empty Redis over PUBLISHED rows.
  const republished = await resetPublished(client);
  const { rows } = await client.query<{ aggregate_id: string; through_seq: string; events: string }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned');
  const pruned = rows.map((row) => ({ aggregate_id: row.aggregate_id, through_seq: Number(row.through_seq) }));
  const unrecoverable = rows.reduce((n, row) => n + Number(row.events), 0);
  const { servedStore } = await claimStore(redis, storeId, { republished, unrecoverable, pruned });
  if (servedStore !== storeId) throw await mismatch(client, redis, storeId, servedStore);
  await client.query(
    `INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilds', '1'), ('redis_rebuilt_at', $1)
     ON CONFLICT (key) DO UPDATE SET value = CASE WHEN outbox_meta.key = 'redis_rebuilds' THEN (outbox_meta.value::bigint + 1)::text ELSE excluded.value END`,
    [String(Date.now())],
  );
  return { kind: 'rebuilt', republished, unrecoverable, unrecoverableAggregates: rows.length };
}

/**
 * Makes sure Redis serves the store before a relay pushes, as `ensurePaired` does for SQLite: claims
 * it on first use, rebuilds it when it lost its state. Of several relays, one pairs at a time (a
 * session advisory lock on a connection of its own, closed afterwards so the lock can never stay
 * behind in the pool); the others then find Redis paired.
 */
export async function ensurePgPaired(pool: Pool, redis: Redis, storeId: string): Promise<Pairing> {
  if (await servesThisStore(pool, redis, storeId)) return { kind: 'paired' };
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PAIRING_LOCK]);
    return await pairLocked(client, redis, storeId);
  } finally {
    // Destroyed, not returned: that ends the session and its advisory lock with it.
    client.release(true);
  }
}
