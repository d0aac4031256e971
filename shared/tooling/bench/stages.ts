// Apart from run-bench.ts so that `outbox bench`'s options are defined without loading the stages
// (ioredis, better-sqlite3) at CLI start-up.

export const BENCH_STAGES = [
  'producer', 'relay', 'consumer', 'growth', 'e2e', 'cli', 'scale-out', 'soak', 'verify',
] as const;
export type BenchStage = (typeof BENCH_STAGES)[number];

/** What `outbox bench` runs unless told: all but the soak and verify, which take minutes and run when named. */
export const DEFAULT_BENCH_STAGES = BENCH_STAGES.filter((stage) => stage !== 'soak' && stage !== 'verify');

/** The server the scale-out stage creates its own database on when `--postgres` is not given. */
export const DEFAULT_BENCH_POSTGRES = 'postgres://postgres@127.0.0.1:5432/postgres';
