import { after, beforeEach } from 'node:test';
import { createDatabase } from '../../shared/lab/init-stores.js';
import { closePartitions, connectTarget, connectTargetPartitions } from '../../shared/outbox/redis/connect-partitions.js';
import type { Partitions } from '../../shared/outbox/redis/partitions.js';
import type { Harness } from './harness.js';

/**
 * Before each test a fresh app.db in the harness's data dir, and the harness's private Redis as
 * `count` partitions (one connection each, opened with the first test: the harness starts its
 * Redis in its own hook; closed after the file). `partitions()` gives them.
 */
export function usePartitions(harness: Harness, count: number): () => Partitions {
  let parts: Partitions | undefined;
  beforeEach(async () => {
    createDatabase(harness.env.dir);
    const target = { redisUrl: harness.redis.url, partitions: count };
    parts ??= await connectTargetPartitions(target, (options) => connectTarget(target, options));
  });
  after(async () => {
    if (parts) await closePartitions(parts);
  });
  return () => parts!;
}
