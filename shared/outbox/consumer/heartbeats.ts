import type { Redis } from 'ioredis';
import { keys } from '../redis/keys.js';

/** How long a consumer counts as alive after its last heartbeat. */
export const HEARTBEAT_TTL_MS = 15_000;
export const HEARTBEAT_EVERY_MS = 3_000;

/** What a consumer app says of itself in its heartbeat, besides its pid and the time. */
export interface HeartbeatDetails {
  /** Events it applied since it started. */
  applied: number;
  /** No message waiting in the queue is older than this, as this consumer saw it (ms). */
  lagMs: number;
  /** Length of `outbox.events` at the heartbeat. */
  queued: number;
  /** Its health endpoint's URL, null when it has none. */
  health: string | null;
}

export interface Heartbeat extends HeartbeatDetails {
  pid: number;
  /** ms since epoch, the consumer's clock. */
  at: number;
  /** Set by a consumer that stopped cleanly: when. */
  stoppedAt?: number;
}

export interface HeartbeatOptions {
  /** The consumer app's details, written to `outbox:consumers` with every beat; without it only the liveness key is kept. */
  details?: () => Promise<HeartbeatDetails>;
  /** Told after every beat Redis acknowledged. */
  onBeat?: (at: number) => void;
}

/**
 * Keeps `outbox:consumer-alive:<id>` alive (what the reclaim of orphaned processing lists goes by)
 * until the returned function is called, and, for a consumer app, writes its heartbeat to
 * `outbox:consumers`. Both are plain SET / HSET of a whole value, so a command ioredis sends twice
 * after a reconnect leaves the same state. On stop the liveness key is deleted and the heartbeat
 * entry gets `stoppedAt` (kept, so that `outbox status` shows when the consumer stopped).
 */
export function startHeartbeat(redis: Redis, consumerId: string, options: HeartbeatOptions = {}): () => Promise<void> {
  const alive = keys.consumerAlive(consumerId);
  let last: Heartbeat | undefined;
  const beat = async () => {
    const at = Date.now();
    const pipeline = redis.pipeline().set(alive, String(at), 'PX', HEARTBEAT_TTL_MS);
    if (options.details) {
      last = { pid: process.pid, at, ...(await options.details()) };
      pipeline.hset(keys.consumers, consumerId, JSON.stringify(last));
    }
    const results = (await pipeline.exec()) ?? [];
    if (results.every(([error]) => error === null)) options.onBeat?.(at);
  };
  /** The last beat: stopping waits for it, or its SET could follow the DEL and keep a stopped consumer alive for HEARTBEAT_TTL_MS. */
  let beating: Promise<void> = Promise.resolve();
  const beatQuietly = () => {
    beating = beat().catch(() => {});
  };
  beatQuietly();
  const timer = setInterval(beatQuietly, HEARTBEAT_EVERY_MS);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await beating;
    const pipeline = redis.pipeline().del(alive);
    if (options.details && last) pipeline.hset(keys.consumers, consumerId, JSON.stringify({ ...last, stoppedAt: Date.now() }));
    await pipeline.exec().catch(() => {});
  };
}

/** A consumer's heartbeat as `outbox status` shows it. */
export interface ConsumerHeartbeat extends Partial<Heartbeat> {
  consumerId: string;
  /** Since the last heartbeat (ms), null when the entry cannot be read. */
  ageMs: number | null;
  /** `alive`: a heartbeat within 15 s; `stale`: older, and not stopped (SIGSTOPped, SIGKILLed, frozen, or cut off from Redis); `stopped`: stopped cleanly; `unreadable`: not JSON. */
  state: 'alive' | 'stale' | 'stopped' | 'unreadable';
}

/** Every entry of `outbox:consumers`, by consumer id; stale ones are shown, never deleted. */
export async function readHeartbeats(redis: Redis, now?: number): Promise<ConsumerHeartbeat[]> {
  const entries = await redis.hgetall(keys.consumers);
  // Measured once read: a beat written while the read was under way is not younger than 0.
  const readAt = now ?? Date.now();
  return Object.entries(entries)
    .map(([consumerId, json]): ConsumerHeartbeat => {
      let beat: Heartbeat;
      try {
        beat = JSON.parse(json) as Heartbeat;
        if (typeof beat !== 'object' || beat === null || typeof beat.at !== 'number') throw new Error('no time');
      } catch {
        return { consumerId, ageMs: null, state: 'unreadable' };
      }
      const ageMs = Math.max(0, readAt - beat.at);
      const state = beat.stoppedAt !== undefined ? 'stopped' : ageMs > HEARTBEAT_TTL_MS ? 'stale' : 'alive';
      return { consumerId, ...beat, ageMs, state };
    })
    .sort((a, b) => a.consumerId.localeCompare(b.consumerId));
}
