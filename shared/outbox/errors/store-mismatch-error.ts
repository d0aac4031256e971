import { StoreRefusedError } from './store-refused-error.js';

/** app.db and Redis belong to different stores (app.db recreated, or another deployment's Redis). Exit code 5. */
export class StoreMismatchError extends StoreRefusedError {
  constructor(
    readonly storeId: string,
    readonly servedStore: string,
    where: { database: string; redis: string },
  ) {
    super(
      `${where.database} is store ${storeId}, but ${where.redis} serves store ${servedStore} ` +
        `(app.db was recreated, or this is another deployment's Redis): run "outbox init --force" to start both over, ` +
        `or point --redis / REDIS_URL / --namespace / OUTBOX_NAMESPACE at the Redis of store ${storeId}`
    );
  }
}
