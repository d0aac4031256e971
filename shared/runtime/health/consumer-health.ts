import type { Redis } from 'ioredis';
import { checkRedis } from './checks.js';
import { failed, healthReport, type AppIdentity, type Check, type HealthReport } from './health-report.js';
import { keys } from '../../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';
import type { ConsumerStats } from '../../outbox/consumer/consumer-stats.js';
import { HEARTBEAT_TTL_MS } from '../../outbox/consumer/heartbeats.js';

/** A consumer whose take loop has not come round for this long is stuck (a take waits 1 s at most). */
export const TAKE_STALE_MS = 30_000;

/**
 * The consumer app's health: Redis answers; its heartbeat was written within the heartbeat TTL
 * (else other consumers reclaim its processing list); its take loop comes round. The lag (see
 * `createConsumerStats`) and the queue length are reported, not judged: a backlog is not a fault.
 */
export async function consumerHealth(identity: AppIdentity & { consumerId: string }, queues: Redis | Partitions, stats: Pick<ConsumerStats, 'snapshot'>): Promise<HealthReport> {
  const { clients } = partitionsOf(queues);
  const redis = clients[0];
  const redisCheck = await checkRedis(redis);
  // Measured after the await: the take loop and the heartbeat go on meanwhile, and their times taken
  // after one read before would give ages below 0.
  const uptimeMs = process.uptime() * 1000;
  const snapshot = stats.snapshot();
  const { heartbeatAgeMs, lastTakeAgeMs, lagMs } = snapshot;
  const heartbeat: Check =
    heartbeatAgeMs === null
      ? uptimeMs > HEARTBEAT_TTL_MS
        ? failed(`no heartbeat written in ${Math.round(uptimeMs / 1000)} s since start`)
        : { ok: true, ageMs: null }
      : heartbeatAgeMs > HEARTBEAT_TTL_MS
        ? failed(`last heartbeat written ${Math.round(heartbeatAgeMs / 1000)} s ago: other consumers may reclaim its processing list`, { ageMs: heartbeatAgeMs })
        : { ok: true, ageMs: heartbeatAgeMs };
  const sinceTake = lastTakeAgeMs ?? uptimeMs;
  const loop: Check = sinceTake > TAKE_STALE_MS ? failed(`no take from the queue for ${Math.round(sinceTake / 1000)} s`, { lastTakeAgeMs }) : { ok: true, lastTakeAgeMs };
  // Over every partition (one Redis: its queue).
  const queued = redisCheck.ok ? await Promise.all(clients.map((client) => client.llen(keys.events))).then((lengths) => lengths.reduce((a, b) => a + b, 0)).catch(() => null) : null;
  const { refusedWaiting, refusedProblem } = snapshot;
  const refused: Check =
    refusedWaiting > 0 ? failed(`stuck: ${refusedWaiting} messages refused for bad state in Redis (${refusedProblem}); tried again until it is fixed`, { refusedWaiting }) : { ok: true, refusedWaiting };
  return healthReport(identity, {
    redis: redisCheck,
    heartbeat: { ...heartbeat, consumerId: identity.consumerId },
    loop,
    refused,
    lag: { ok: true, lagMs, queued, applied: snapshot.applied, duplicates: snapshot.duplicates, dead: snapshot.dead, errors: snapshot.errors },
  });
}
