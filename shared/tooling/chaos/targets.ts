// Apart from run-chaos.ts so that `outbox chaos`'s options are defined without loading the chaos
// run (ioredis, better-sqlite3) at CLI start-up.

export const CHAOS_TARGETS = ['relay', 'consumer', 'producer', 'redis', 'redis-wipe', 'prune', 'pause', 'sqlite-lock', 'handler-fail', 'corrupt-state'] as const;
export type ChaosTarget = (typeof CHAOS_TARGETS)[number];
/** What `outbox chaos` hits unless told otherwise: process and broker faults, no data faults. */
export const DEFAULT_CHAOS_TARGETS: ChaosTarget[] = ['relay', 'consumer', 'producer', 'redis'];

/** Chaos on PostgreSQL and a Redis Cluster (`outbox chaos --database …`): kill relays, kill consumers, restart a cluster node with or without its data. */
export const SCALE_OUT_TARGETS = ['relay', 'consumer', 'cluster-node', 'cluster-node-wipe'] as const;
export type ScaleOutTarget = (typeof SCALE_OUT_TARGETS)[number];
/** What `outbox chaos --database …` hits unless told otherwise: process faults and node restarts with their data. */
export const DEFAULT_SCALE_OUT_TARGETS: ScaleOutTarget[] = ['relay', 'consumer', 'cluster-node'];
