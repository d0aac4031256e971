import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import type { Queryable } from './pg-schema.js';

/** `PostgreSQL database <name>`, for messages naming the store. */
export async function pgStoreName(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ name: string }>('SELECT current_database() AS name');
  return `PostgreSQL database ${rows[0].name}`;
}

/** The store id the outbox tables were created with; every message the relay pushes carries it. */
export async function pgStoreIdOf(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ value: string }>("SELECT value FROM outbox_meta WHERE key = 'store_id'");
  if (!rows[0]?.value) {
    throw new StoreUnavailableError(`${await pgStoreName(db)} has no store id (its outbox_meta table lost the store_id row): restore it from a backup, or recreate the outbox tables`);
  }
  return rows[0].value;
}

/** True when this store ever published an event (a row is PUBLISHED, or was pruned after it was). */
export async function pgHasPublished(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ published: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'PUBLISHED') OR EXISTS (SELECT 1 FROM outbox_pruned) AS published",
  );
  return rows[0].published;
}
