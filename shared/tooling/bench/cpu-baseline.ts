/**
 * Issue 14's reference for CPU per 1,000 events: the first figures `outbox bench` measured (full
 * sizes, before the issue's optimisations), process and Redis together per stage. The table shows
 * each run's figures against these; the target is 25 % less.
 */
export const CPU_BASELINE = {
  /** Where and when: the mean of two full runs of commit 083df2b (the bench of issue 14, before its optimisations), 2-core AMD EPYC, quiet. */
  measured: '083df2b, 2026-12-01',
  /** The order service, one order (one event) per transaction: ms of CPU per 1,000 orders (78.4, 85.1). */
  producerMs: 81.8,
  /** relayAll over 100,000 rows: the relay's process plus Redis, ms per 1,000 events (9.5, 9.7). */
  relayMs: 9.6,
  /** The consumer in this thread (Redis effects, 10 % duplicates): its process plus Redis, ms per 1,000 applied events (31.1, 28.4). */
  consumerMs: 29.8,
  /** The same handler set as a module on 2 worker threads: ms per 1,000 applied events (46.4, 37.4). */
  poolMs: 41.9,
} as const;

/** The target: 25 % less than the baseline. */
export const CPU_TARGET_SHARE = 0.75;
