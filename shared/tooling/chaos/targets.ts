// Apart from run-chaos.ts so that `outbox chaos`'s options are defined without loading the chaos
// run (ioredis, better-sqlite3) at CLI start-up.

export const CHAOS_TARGETS = ['relay', 'consumer', 'producer', 'redis', 'redis-wipe', 'prune', 'pause', 'sqlite-lock', 'handler-fail'] as const;
export type ChaosTarget = (typeof CHAOS_TARGETS)[number];
/** What `outbox chaos` hits unless told otherwise: process and broker faults, no data faults. */
export const DEFAULT_CHAOS_TARGETS: ChaosTarget[] = ['relay', 'consumer', 'producer', 'redis'];
