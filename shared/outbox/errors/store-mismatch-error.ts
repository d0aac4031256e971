import { StoreRefusedError } from './store-refused-error.js';

/**
 * app.db and Redis belong to different stores (app.db recreated, or another deployment's Redis). Exit
 * code 5. The advice is a namespace, never init --force: that would delete the other deployment's keys.
 */
export class StoreMismatchError extends StoreRefusedError {
  constructor(
    readonly storeId: string,
    readonly servedStore: string,
    where: { database: string; redis: string },
  ) {
    super(
      `${where.database} is store ${storeId}, but ${where.redis} serves store ${servedStore} ` +
        `(another deployment's Redis, or app.db was recreated): give this store a namespace of its own ` +
        `(--namespace / OUTBOX_NAMESPACE), or point --redis / REDIS_URL at the Redis of store ${storeId}`
    );
  }
}
