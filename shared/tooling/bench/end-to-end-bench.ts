import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../../outbox/store/open-database.js';
import { createDatabase } from '../../lab/init-stores.js';
import { Pm2 } from '../local/pm2.js';
import { freePort, RedisServer, testClient } from '../local/redis-server.js';
import { waitFor } from '../local/wait-for.js';
import { keys } from '../../outbox/redis/keys.js';
import { percentile } from './measure.js';
import { pidCpuMs, redisCpuMs } from './cpu-time.js';
import { progress } from './progress.js';

export interface EndToEndFigures {
  /** Operations per second the producer's traffic generator was asked for. */
  rate: number;
  durationMs: number;
  /** Events measured (after a 2 s warm-up). */
  events: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
  maxMs: number;
  /**
   * Where the time goes, p99 of each part: commit -> in Redis's queue (relay: the row's created_at
   * to its published_at, Redis's clock when the push reached the queue) and in the queue -> applied
   * (consumer: published_at to appliedAt, Redis's clock when the apply script ran).
   */
  relayP99Ms: number;
  consumerP99Ms: number;
  /** Events whose relay or consumer part came out negative (0 unless a clock stepped back). */
  negativeLags: number;
  /**
   * From `pm2 start` (taken just before it) to the first event's appliedAt: the apps start under
   * traffic. pm2's daemon is already running (as on a server, where it is started at boot): its
   * own start is `pm2DaemonStartMs`, measured before.
   */
  firstAppliedAfterStartMs: number;
  /**
   * Where the first event's time goes, each step in ms after `pm2 start` (as `firstAppliedAfterStartMs`):
   * pm2's CLI returned; each app started by pm2's daemon (`pm_uptime`) and ready (its own log line:
   * relay and consumer started, producer listening); the first commit (created_at), the first
   * message in Redis (published_at) and the first event applied.
   */
  startupSteps: { step: string; atMs: number }[];
  /** How long `pm2 ping` took to start pm2's daemon on a new PM2_HOME (no app yet): what a first `pm2 start` adds. */
  pm2DaemonStartMs: number;
  /** p99 commit → applied of the events committed in the first 3 s of traffic, while the relay and the consumer start (the warm-up the figures above leave out). */
  startupP99Ms: number;
  startupEvents: number;
  /** The start-up burst's window, from the first commit (ms). */
  startupWindowMs: number;
  /**
   * CPU time per 1,000 events committed in the steady window (from the first event applied to the
   * end of the traffic), ms: each pm2 app (all its threads, from /proc) and the Redis server (INFO
   * cpu). An app restarted meanwhile is left out.
   */
  cpuPerThousand: { app: string; ms: number }[];
  redisCpuPerThousand: number;
  /**
   * Redis's own stalls over the run (`LATENCY LATEST`, events of 5 ms or more, the monitor on
   * from Redis's start): per event (`command`, `fast-command`, `aof-fsync-always`,
   * `aof-write-pending-fsync`, …) the longest, ms. Empty when none reached 5 ms.
   */
  redisStalls: { event: string; maxMs: number }[];
}

/** Redis's latency monitor threshold in the end-to-end stage, ms. */
const REDIS_STALL_MS = 5;

/** The start-up burst: the events committed in the first seconds of traffic. */
const STARTUP_MS = 3000;

const WARM_UP_MS = 2000;

/**
 * Commit -> effect applied, under pm2 as in production: the producer's traffic generator commits,
 * the BullMQ-scheduled relay publishes, the consumer applies. Latency is the processed entry's
 * appliedAt minus the outbox row's created_at (one machine, one clock). Each timestamp is taken
 * where its step happens: created_at by the producer in the transaction, published_at by Redis
 * (TIME in the push script) as the messages reach the queue, appliedAt by Redis (TIME in the apply
 * script) as the event is applied.
 */
export async function benchEndToEnd(workspace: string, rate: number, durationMs: number): Promise<EndToEndFigures> {
  const dataDir = join(workspace, 'e2e');
  const logDir = join(workspace, 'e2e-logs');
  // The managed Redis's persistence (managed-redis.ts): what `pm2 start` runs without REDIS_URL.
  const redis = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always'], join(workspace, 'e2e-redis'));
  const client = testClient(redis.url);
  await client.config('SET', 'latency-monitor-threshold', String(REDIS_STALL_MS));
  const pm2 = new Pm2({
    OUTBOX_DIR: dataDir,
    REDIS_URL: redis.url,
    PORT: String(await freePort()),
    OUTBOX_LOG_DIR: logDir,
    OUTBOX_RATE: String(rate),
    OUTBOX_DURATION: `${durationMs}ms`,
  });
  // What `outbox init` does: the apps never create app.db.
  createDatabase(dataDir);
  const bar = progress(`end to end: ${rate} operations/s under pm2`, durationMs);
  try {
    const daemonAt = Date.now();
    const daemon = await pm2.run('ping');
    if (daemon.code !== 0) throw new Error(`pm2 ping failed: ${daemon.stderr}`);
    const pm2DaemonStartMs = Date.now() - daemonAt;
    const startedAt = Date.now();
    const started = await pm2.run('start', 'ecosystem.config.cjs');
    if (started.code !== 0) throw new Error(`pm2 start failed: ${started.stderr}`);
    const startReturnedMs = Date.now() - startedAt;
    await waitFor(async () => (await client.hlen(keys.processed)) > 0, { timeoutMs: 30_000, message: 'no event got through' });
    const begin = Date.now();
    const listed = (await pm2.list()).filter((app) => app.pid > 0);
    const apps = listed.map((app) => ({ name: app.name, pid: app.pid, before: pidCpuMs(app.pid) }));
    const redisBefore = await redisCpuMs([redis.url]);
    await waitFor(
      () => {
        bar.set(Math.min(durationMs, Date.now() - begin));
        return Date.now() - begin >= durationMs;
      },
      { timeoutMs: durationMs + 10_000, intervalMs: 200 },
    );
    const end = Date.now();
    const appsUsed = apps.map((app) => ({ app: app.name, used: (pidCpuMs(app.pid) ?? NaN) - (app.before ?? NaN) }));
    const redisUsed = (await redisCpuMs([redis.url])) - redisBefore;
    const db = openDatabase(dataDir);
    try {
      const committed = db.prepare<[number, number], number>('SELECT COUNT(*) FROM outbox WHERE created_at >= ? AND created_at < ?').pluck().get(begin, end)!;
      const perThousand = (ms: number) => (ms * 1000) / committed;
      const total = () => db.prepare('SELECT COUNT(*) FROM outbox').pluck().get() as number;
      await waitFor(async () => (await client.hlen(keys.processed)) === total() && (await client.llen(keys.events)) === 0, {
        timeoutMs: 60_000,
        message: 'the system did not drain',
      });
      const rows = db.prepare<[], { event_id: string; created_at: number; published_at: number }>('SELECT event_id, created_at, published_at FROM outbox ORDER BY id').all();
      const firstAt = rows[0]?.created_at ?? 0;
      const measured = rows.filter((row) => row.created_at >= firstAt + WARM_UP_MS);
      const startup = rows.filter((row) => row.created_at < firstAt + STARTUP_MS);
      const startupLatencies: number[] = [];
      let firstAppliedAt = Infinity;
      for (const { row, appliedAt } of await appliedAtOf(client, startup)) {
        firstAppliedAt = Math.min(firstAppliedAt, appliedAt);
        startupLatencies.push(appliedAt - row.created_at);
      }
      startupLatencies.sort((a, b) => a - b);
      const latencies: number[] = [];
      const relayLags: number[] = [];
      const consumerLags: number[] = [];
      let negativeLags = 0;
      for (const { row, appliedAt } of await appliedAtOf(client, measured)) {
        const relayLag = row.published_at - row.created_at;
        const consumerLag = appliedAt - row.published_at;
        if (relayLag < 0 || consumerLag < 0) negativeLags += 1;
        latencies.push(appliedAt - row.created_at);
        relayLags.push(relayLag);
        consumerLags.push(consumerLag);
      }
      for (const list of [latencies, relayLags, consumerLags]) list.sort((a, b) => a - b);
      const startupSteps = [
        { step: 'pm2 start returned', atMs: startReturnedMs },
        ...listed.flatMap((app) => {
          const ready = readyAt(logDir, app.name);
          return [
            { step: `${app.name} started by pm2`, atMs: (app.pm2_env.pm_uptime ?? NaN) - startedAt },
            { step: `${app.name} ready`, atMs: (ready ?? NaN) - startedAt },
          ];
        }),
        { step: 'first commit', atMs: firstAt - startedAt },
        { step: 'first message in Redis', atMs: Math.min(...startup.map((row) => row.published_at)) - startedAt },
        { step: 'first event applied', atMs: firstAppliedAt - startedAt },
      ]
        .filter(({ atMs }) => Number.isFinite(atMs))
        .sort((a, b) => a.atMs - b.atMs);
      bar.finish();
      return {
        rate,
        durationMs,
        events: latencies.length,
        p50Ms: percentile(latencies, 50),
        p95Ms: percentile(latencies, 95),
        p99Ms: percentile(latencies, 99),
        maxMs: latencies[latencies.length - 1] ?? NaN,
        relayP99Ms: percentile(relayLags, 99),
        consumerP99Ms: percentile(consumerLags, 99),
        negativeLags,
        firstAppliedAfterStartMs: firstAppliedAt - startedAt,
        pm2DaemonStartMs,
        startupSteps,
        startupP99Ms: percentile(startupLatencies, 99),
        startupEvents: startupLatencies.length,
        startupWindowMs: STARTUP_MS,
        cpuPerThousand: appsUsed.filter(({ used }) => Number.isFinite(used)).map(({ app, used }) => ({ app, ms: perThousand(used) })),
        redisCpuPerThousand: perThousand(redisUsed),
        redisStalls: ((await client.call('LATENCY', 'LATEST')) as [string, number, number, number][]).map(([event, , , maxMs]) => ({ event, maxMs: Number(maxMs) })),
      };
    } finally {
      db.close();
    }
  } finally {
    client.disconnect();
    await pm2.kill();
    await redis.destroy();
  }
}

/** What each app logs once it is ready (its first such line counts). */
const READY_LINE: Record<string, RegExp> = {
  'outbox-relay': /"msg":"relay started"/,
  'outbox-consumer': /"msg":"consumer started"/,
  'outbox-producer': /"msg":"producer listening"/,
};

/** When app `name` logged that it is ready (ms since the epoch, from its log line's time), undefined when it did not. */
function readyAt(logDir: string, name: string): number | undefined {
  const file = join(logDir, `${name}.log`);
  const pattern = READY_LINE[name];
  if (!pattern || !existsSync(file)) return undefined;
  const line = readFileSync(file, 'utf8').split('\n').find((text) => pattern.test(text));
  const time = line ? (JSON.parse(line) as { time?: string }).time : undefined;
  return time === undefined ? undefined : Date.parse(time);
}

/** Each row's appliedAt (Redis's clock in the apply script), read from `processed` 1,000 at a time; rows not applied are left out. */
async function appliedAtOf<R extends { event_id: string }>(client: ReturnType<typeof testClient>, rows: R[]): Promise<{ row: R; appliedAt: number }[]> {
  const applied: { row: R; appliedAt: number }[] = [];
  for (let i = 0; i < rows.length; i += 1000) {
    const chunk = rows.slice(i, i + 1000);
    const values = await client.hmget(keys.processed, ...chunk.map((row) => row.event_id));
    values.forEach((value, j) => {
      if (value) applied.push({ row: chunk[j], appliedAt: (JSON.parse(value) as { appliedAt: number }).appliedAt });
    });
  }
  return applied;
}
