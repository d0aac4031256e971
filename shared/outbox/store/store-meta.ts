import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import type { Db } from './open-database.js';

/**
 * The store id `outbox init` gave this database; every message the relay pushes carries it. A
 * database that lost it is refused: with an empty id it would claim a Redis and push messages that
 * name no store.
 */
export function storeIdOf(db: Db): string {
  const id = db.prepare("SELECT value FROM outbox_meta WHERE key = 'store_id'").pluck().get() as string | undefined;
  if (!id) {
    throw new StoreUnavailableError(
      `${db.name} has no store id (its outbox_meta table lost the store_id row): restore app.db from a backup, or start over with "outbox init --force"`,
    );
  }
  return id;
}

/** Bumped (inside the caller's transaction) by anything that sets PUBLISHED rows back to PENDING. */
export function bumpReplayGeneration(db: Db): void {
  db.prepare("UPDATE outbox_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'replay_generation'").run();
}

/** Reads the replay generation: a relay compares it before marking the rows it pushed. */
export function replayGenerationReader(db: Db): () => number {
  const read = db.prepare("SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'replay_generation'").pluck();
  return () => read.get() as number;
}

/** True when this store ever published an event (a row is PUBLISHED, or was pruned after it was). */
export function hasPublished(db: Db): boolean {
  return (
    db.prepare("SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'PUBLISHED') OR EXISTS (SELECT 1 FROM outbox_pruned)").pluck().get() === 1
  );
}
