import type { Redis } from 'ioredis';
import { redactUrl } from '../config.js';
import { RedisSettingsError } from '../errors/redis-settings-error.js';
import type { Logger } from '../logger.js';

/** The Redis settings that decide whether outbox's state survives memory pressure and a restart. */
export interface RedisSettings {
  /** `maxmemory-policy`; anything but `noeviction` may delete the queue, counters and consumer state. */
  maxmemoryPolicy: string;
  aofEnabled: boolean;
  /** `appendfsync` (always, everysec, no); null when CONFIG is not allowed. */
  appendfsync: string | null;
  /** RDB save points as `CONFIG GET save` gives them ('' = no snapshots); null when CONFIG is not allowed. */
  save: string | null;
}

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

/** CONFIG may be renamed away or denied by an ACL: then the value is unknown (null). */
async function configValue(redis: Redis, name: string): Promise<string | null> {
  try {
    const reply = (await redis.call('CONFIG', 'GET', name)) as string[];
    return reply.length >= 2 ? reply[1] : null;
  } catch {
    return null;
  }
}

/** Reads the settings from INFO (always allowed) and, where it is allowed, CONFIG GET. */
export async function readRedisSettings(redis: Redis): Promise<RedisSettings> {
  const [memory, persistence, appendfsync, save] = await Promise.all([
    redis.info('memory'),
    redis.info('persistence'),
    configValue(redis, 'appendfsync'),
    configValue(redis, 'save'),
  ]);
  return {
    maxmemoryPolicy: infoField(memory, 'maxmemory_policy') ?? 'unknown',
    aofEnabled: infoField(persistence, 'aof_enabled') === '1',
    appendfsync,
    save,
  };
}

/** What to tell an operator whose Redis may evict keys (after "Redis" or "Redis at <url>"). */
export function evictionProblem(policy: string): string {
  return `may evict keys (maxmemory-policy ${policy}): outbox needs noeviction: run "redis-cli CONFIG SET maxmemory-policy noeviction" and set it in redis.conf`;
}

/** What Redis's memory says now is wrong for outbox (an evicting policy, or full), or undefined when nothing is. */
export async function memoryProblem(redis: Redis): Promise<string | undefined> {
  const memory = await redis.info('memory');
  const policy = infoField(memory, 'maxmemory_policy') ?? 'unknown';
  if (policy !== 'noeviction') return evictionProblem(policy);
  const used = Number(infoField(memory, 'used_memory'));
  const max = Number(infoField(memory, 'maxmemory'));
  if (max > 0 && used >= max) {
    return `is full (used_memory ${used} of maxmemory ${max}): it refuses writes until it has room: raise maxmemory, or lower the dedupe window`;
  }
  return undefined;
}

/** How often a running app looks at Redis's memory settings again. */
export const SETTINGS_WATCH_MS = 10_000;

/**
 * Looks at Redis's memory every `everyMs` for as long as the app runs: a policy switched to eviction
 * at run time, or a full Redis, is logged at error once per incident, and its end at info.
 */
export function watchRedisMemory(redis: Redis, log: Logger, everyMs = SETTINGS_WATCH_MS): () => void {
  let said: string | undefined;
  const timer = setInterval(() => {
    memoryProblem(redis).then(
      (problem) => {
        if (problem === said) return;
        if (problem) log.error(`Redis ${problem}`);
        else log.info('Redis memory settings are right again (noeviction, room left)');
        said = problem;
      },
      () => {},
    );
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Refuses a Redis that may evict keys: evicting the BullMQ scheduler, the counters, the applied
 * seqs or the inventory makes the relay stop and verify report violations that never happened.
 * Reads `INFO memory`, which works where CONFIG is disabled.
 */
export async function checkRedisSettings(redis: Redis, url: string): Promise<void> {
  const policy = infoField(await redis.info('memory'), 'maxmemory_policy');
  if (policy !== 'noeviction') throw new RedisSettingsError(`Redis at ${redactUrl(url)} ${evictionProblem(policy ?? 'unknown')}`);
}
