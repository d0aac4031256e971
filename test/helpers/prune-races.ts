import type { PruneRows } from '../../shared/operations/prune/prune.js';

/**
 * `rows` whose first delete runs `meanwhile` just before it: what another process does between
 * prune's read of a batch and its delete (an `outbox replay`, say). Each call makes a fresh one.
 */
export function beforeFirstDelete(rows: PruneRows, meanwhile: () => unknown): PruneRows {
  let raced = false;
  return {
    ...rows,
    async deleteRange(after, through, ids) {
      if (!raced) {
        raced = true;
        await meanwhile();
      }
      return rows.deleteRange(after, through, ids);
    },
  };
}

/** `rows` whose first read runs `meanwhile` before it resolves: what happens between prune's read of a batch and its delete. */
export function afterFirstRead(rows: PruneRows, meanwhile: () => Promise<void>): PruneRows {
  let reads = 0;
  return {
    ...rows,
    async readBatch(after, limit) {
      const batch = await rows.readBatch(after, limit);
      if ((reads += 1) === 1) await meanwhile();
      return batch;
    },
  };
}
