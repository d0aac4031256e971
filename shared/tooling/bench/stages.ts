// Apart from run-bench.ts so that `outbox bench`'s options are defined without loading the stages
// (ioredis, better-sqlite3) at CLI start-up.

export const BENCH_STAGES = ['producer', 'relay', 'consumer', 'growth', 'e2e', 'cli'] as const;
export type BenchStage = (typeof BENCH_STAGES)[number];
