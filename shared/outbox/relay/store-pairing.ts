import type { Redis } from 'ioredis';
import type { Db } from '../store/open-database.js';
import { bumpReplayGeneration, hasPublished, storeIdOf } from '../store/store-meta.js';
import { StoreMismatchError } from '../errors/store-mismatch-error.js';
import { describeRedis } from '../redis/describe.js';
import { keys } from '../redis/keys.js';
import { scanKeys, unlinkAll } from '../redis/scan-keys.js';
import { claimStore } from '../redis/scripts.js';

/** What `ensurePaired` found or did. */
export type Pairing =
  | { kind: 'paired' }
  /** First use: this Redis served no store and the store never published, so nothing was lost. */
  | { kind: 'claimed' }
  /**
   * Redis lost its state (its meta hash is gone while the store has published events): every
   * published row was set back to PENDING, so the relay publishes everything again and the
   * consumer rebuilds every effect. `unrecoverable` events were pruned before the loss.
   */
  | { kind: 'rebuilt'; republished: number; unrecoverable: number; unrecoverableAggregates: number };

/** Rows set back to PENDING per transaction, so a producer never waits long for the write lock. */
const RESET_CHUNK = 10_000;

/** The one-line refusal of a pair that does not belong together, naming both stores and where they are. */
export function mismatch(db: Db, redis: Redis, storeId: string, servedStore: string): StoreMismatchError {
  return new StoreMismatchError(storeId, servedStore, { database: db.name, redis: describeRedis(redis) });
}

/** The store id this Redis serves, or null when its meta hash is gone. */
export async function servedStore(redis: Redis): Promise<string | null> {
  return redis.hget(keys.meta, 'store');
}

/** Throws when Redis serves a store other than app.db's; resolves the store it serves (null: none). */
export async function assertSameStore(db: Db, redis: Redis): Promise<string | null> {
  const served = await servedStore(redis);
  const storeId = storeIdOf(db);
  if (served !== null && served !== storeId) throw mismatch(db, redis, storeId, served);
  return served;
}

/**
 * Deletes every dedupe marker before a claim: the claim deletes the rest of the consumer state, and
 * a marker left without its effect would have the rebuilt event skipped as a duplicate. No consumer
 * applies (so sets a marker) while this Redis serves no store.
 */
async function deleteDedupeMarkers(redis: Redis): Promise<void> {
  await unlinkAll(redis, scanKeys(redis, keys.seen('*')));
}

/** Sets every PUBLISHED row back to PENDING, in chunks by id; resolves how many. */
function resetPublished(db: Db): number {
  const maxId = (db.prepare('SELECT MAX(id) FROM outbox').pluck().get() as number | null) ?? 0;
  const reset = db.prepare<[number, number]>("UPDATE outbox SET status = 'PENDING', published_at = NULL WHERE id > ? AND id <= ? AND status = 'PUBLISHED'");
  const chunk = db.transaction((from: number) => {
    bumpReplayGeneration(db);
    return reset.run(from, from + RESET_CHUNK).changes;
  });
  let total = 0;
  for (let from = 0; from < maxId; from += RESET_CHUNK) total += chunk.immediate(from);
  return total;
}

/**
 * Makes sure Redis serves app.db's store before the relay pushes. When Redis serves no store:
 * on first use it claims it; when the store has published before, Redis lost its state, and the
 * relay rebuilds it: every published row goes back to PENDING (committed first, so a crash
 * half-way only repeats the rebuild), then the store is claimed, which deletes whatever consumer
 * state a partial loss left (it would double effects or skip events) and gives pruned aggregates
 * their applied seq (their later events can be applied; the pruned ones' effects are gone and
 * recorded as unrecoverable). `assertLive` is called first: a relay whose app.db was replaced must not claim.
 */
export async function ensurePaired(db: Db, redis: Redis, assertLive: () => void = () => {}): Promise<Pairing> {
  const served = await assertSameStore(db, redis);
  if (served !== null) return { kind: 'paired' };
  assertLive();
  const storeId = storeIdOf(db);
  await deleteDedupeMarkers(redis);
  if (!hasPublished(db)) {
    const { servedStore: now } = await claimStore(redis, storeId);
    if (now !== storeId) throw mismatch(db, redis, storeId, now);
    return { kind: 'claimed' };
  }
  const republished = resetPublished(db);
  const pruned = db.prepare<[], { aggregate_id: string; through_seq: number; events: number }>('SELECT aggregate_id, through_seq, events FROM outbox_pruned').all();
  const unrecoverable = pruned.reduce((n, p) => n + p.events, 0);
  const { servedStore: now } = await claimStore(redis, storeId, { republished, unrecoverable, pruned });
  if (now !== storeId) throw mismatch(db, redis, storeId, now);
  db.transaction(() => {
    db.prepare("INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilds', '1') ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1").run();
    db.prepare("INSERT INTO outbox_meta (key, value) VALUES ('redis_rebuilt_at', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value").run(String(Date.now()));
  }).immediate();
  return { kind: 'rebuilt', republished, unrecoverable, unrecoverableAggregates: pruned.length };
}

/** One line for logs and the CLI. */
/** `source`: the store the rebuild reads, as named in the line. */
export function describePairing(pairing: Exclude<Pairing, { kind: 'paired' }>, source = 'SQLite'): string {
  if (pairing.kind === 'claimed') return 'this Redis now serves the store';
  const lost =
    pairing.unrecoverable > 0
      ? `; ${pairing.unrecoverable} event(s) of ${pairing.unrecoverableAggregates} aggregate(s) were pruned before the loss: their effects cannot be rebuilt (verify names them)`
      : '';
  return `Redis lost its state: rebuilding it from ${source}, ${pairing.republished} published event(s) set back to PENDING to be applied again${lost}`;
}
