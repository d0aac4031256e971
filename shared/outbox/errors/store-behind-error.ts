import { StoreRefusedError } from './store-refused-error.js';

/**
 * The store went back in time under its Redis: Redis was pushed an outbox row the store no longer
 * holds, or now holds as another event (app.db restored from an older backup of itself, a power
 * loss that rolled back committed transactions). Its new events would reuse the lost events' seqs
 * and be skipped as their duplicates, so the relay pushes nothing until Redis is rebuilt from the
 * store (`outbox verify --repair`). Exit code 5.
 */
export class StoreBehindError extends StoreRefusedError {
  constructor(
    readonly rowId: number,
    readonly pushedEvent: string,
    readonly storeEvent: string | null,
    where: { database: string; redis: string },
  ) {
    const now = storeEvent === null ? 'no longer holds it' : `now holds ${storeEvent} there`;
    super(
      `${where.database} is behind ${where.redis}: Redis was pushed outbox row ${rowId} as event ${pushedEvent}, and ${where.database} ${now} ` +
        `(restored from an older backup, or rolled back by a power loss?): its new events would be skipped as duplicates of lost ones, so nothing is pushed; ` +
        `run "outbox verify --repair" to rebuild Redis from it (stop the apps first)`
    );
  }
}
