import { StoreRefusedError } from './store-refused-error.js';

/**
 * The store went back in time under its Redis: Redis was pushed an outbox row the store no longer
 * holds, or now holds as another event, or applied an aggregate past the store's last seq for it
 * (app.db restored from an older backup of itself, a PostgreSQL dump restored, a power loss that
 * rolled back committed transactions). Its new events would reuse the lost events' seqs and be
 * skipped as their duplicates, so the relay pushes nothing and prune deletes nothing until Redis is
 * rebuilt from the store (`outbox verify --repair`). Exit code 5.
 */
export class StoreBehindError extends StoreRefusedError {
  /** `found`: what shows it, e.g. `Redis was pushed outbox row 5 as event …, and app.db no longer holds it`. */
  constructor(found: string, where: { database: string; redis: string }) {
    super(
      `${where.database} is behind ${where.redis}: ${found} ` +
        `(restored from an older backup, or rolled back by a power loss?): its new events would be skipped as duplicates of lost ones, so nothing is pushed or pruned; ` +
        `run "outbox verify --repair" to rebuild Redis from it (stop the apps first)`,
    );
  }
}
