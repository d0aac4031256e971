/**
 * Issue 14's reference for CPU per 1,000 events: the first figures `outbox bench` measured (full
 * sizes, before the issue's optimisations), process and Redis together per stage. The table shows
 * each run's figures against these; the target is 25 % less.
 */
export const CPU_BASELINE = {
  measured: 'PLACEHOLDER',
  /** The order service, one order (one event) per transaction: ms of CPU per 1,000 orders. */
  producerMs: NaN,
  /** relayAll over 100,000 rows: the relay's process plus Redis, ms per 1,000 events. */
  relayMs: NaN,
  /** The consumer in this thread (Redis effects, 10 % duplicates): its process plus Redis, ms per 1,000 applied events. */
  consumerMs: NaN,
} as const;

/** The target: 25 % less than the baseline. */
export const CPU_TARGET_SHARE = 0.75;
