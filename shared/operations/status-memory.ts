import { readWindow } from '../outbox/redis/dedupe-window.js';
import type { Cluster, Redis } from 'ioredis';
import { keys } from '../outbox/redis/keys.js';
import { countGuards, guardBytesPerAggregate } from '../outbox/redis/guards.js';
import { isCluster, mastersOf, slotOf } from '../outbox/redis/cluster-client.js';
import { keyPrefixOfConnection } from '../outbox/redis/scan-keys.js';
import { readEnvelope } from '../outbox/redis/envelope.js';

/** Processed entries sampled (HRANDFIELD) for the apply rate; dedupe markers sampled among them. */
const RATE_SAMPLE = 200;
const MARKER_SAMPLE = 3;
/** Below this many days to maxmemory, status warns. */
export const DAYS_WARNING = 7;
const DAY_MS = 86_400_000;

/** What one partition holds, in bytes, and how fast it applies; every read is O(1) or O(samples). */
export interface PartitionMemory {
  /** The Redis server (`host:port`) the partition's keys live on. */
  server: string;
  /** Events with a record in the window (HLEN processed). */
  events: number;
  /** MEMORY USAGE of processed, apply-count and the applied log together. */
  eventRecordBytes: number;
  /** Mean MEMORY USAGE of the dedupe markers sampled; null when none of them was found. */
  markerBytes: number | null;
  /** Aggregates with a seq guard (HLEN applied-seq) and its MEMORY USAGE. */
  aggregates: number;
  aggregateBytes: number;
  parkedBytes: number;
  deadLetterBytes: number;
  /** When the oldest dead letter was set aside (its deadAt, ms), null when none. */
  oldestDeadAt: number | null;
  /** The stats hash's applied counter. */
  applied: number;
  /** Events applied per second since the oldest sampled processed entry; null when it cannot be told. */
  rate: { perSec: number; overMs: number } | null;
  /** Whether the window's sweep has dropped records: from then on the records no longer grow. */
  windowFull: boolean;
  /** Redis's clock (TIME), ms. */
  now: number;
}

/** One Redis server's memory, with what the partitions on it add per second. */
export interface ServerMemory {
  address: string;
  partitions: number[];
  usedMemory: number;
  /** 0: no limit. */
  maxmemory: number;
  /** used_memory at maxmemory: Redis (noeviction) refuses writes. */
  oom: boolean;
  growthBytesPerSec: number | null;
  /** At the growth above, until used_memory reaches maxmemory; null: no limit, or not growing, or rate unknown. */
  daysUntilFull: number | null;
}

export interface MemoryStatus {
  servers: ServerMemory[];
  /** Bytes kept per event in the dedupe window: its records plus one dedupe marker; null when none applied. */
  bytesPerEvent: number | null;
  /** Bytes per aggregate's seq guard; null when none. */
  bytesPerAggregate: number | null;
  aggregates: number;
  eventsPerSec: number | null;
  /** How the rate and the growth were computed, one sentence. */
  method: string;
  /** The soonest of the servers'. */
  daysUntilFull: number | null;
}

/** What status shows of the parked and dead-lettered entries. */
export interface HeldStatus {
  parked: number;
  parkedBytes: number;
  deadLettered: number;
  deadLetterBytes: number;
  oldestDeadLetterAgeMs: number | null;
}

const usage = async (redis: Redis, key: string): Promise<number> =>
  Number((await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '5')) ?? 0);

function infoNumber(info: string, field: string): number {
  return Number(new RegExp(`^${field}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
}

/** The master that holds a partition's keys: the connection itself without a Cluster. */
export function serverOf(redis: Redis): Redis {
  if (!isCluster(redis)) return redis;
  const cluster = redis as unknown as Cluster & { slots: string[][] };
  const nodeKey = cluster.slots[slotOf(keyPrefixOfConnection(redis) + keys.processed)]?.[0];
  const masters = mastersOf(redis);
  return masters.find((node) => addressOf(node) === nodeKey) ?? masters[0];
}

function addressOf(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

/** The apply rate from a sample of processed entries: the applied counter's rise since the oldest of them. */
function rateOf(sample: string[], applied: number, now: number): PartitionMemory['rate'] {
  let oldest: { applyOrder: number; appliedAt: number } | undefined;
  // WITHVALUES: field, value, field, value…
  for (let i = 1; i < sample.length; i += 2) {
    try {
      const { applyOrder, appliedAt } = JSON.parse(sample[i]) as { applyOrder?: unknown; appliedAt?: unknown };
      if (typeof applyOrder !== 'number' || typeof appliedAt !== 'number') continue;
      // The lowest order, not the earliest time: a batch's events share one appliedAt.
      if (!oldest || applyOrder < oldest.applyOrder) oldest = { applyOrder, appliedAt };
    } catch {
      // A corrupt entry (verify names it) says nothing of the rate.
    }
  }
  // A counter below the entry's order was reset (a Redis loss): no rate.
  if (!oldest || applied < oldest.applyOrder || now <= oldest.appliedAt) return null;
  const overMs = now - oldest.appliedAt;
  return { perSec: ((applied - oldest.applyOrder) * 1000) / overMs, overMs };
}

/** The aggregates the sampled processed entries name (field, value, field, value…). */
function aggregatesOf(sample: string[]): string[] {
  const found = new Set<string>();
  for (let i = 1; i < sample.length; i += 2) {
    try {
      const { aggregate } = JSON.parse(sample[i]) as { aggregate?: unknown };
      if (typeof aggregate === 'string') found.add(aggregate);
    } catch {
      // A corrupt entry (verify names it) names no aggregate.
    }
  }
  return [...found];
}

/** Reads one partition's figures; no call walks a big key (MEMORY USAGE samples 5, HRANDFIELD 200). */
export async function readPartitionMemory(redis: Redis, events: number, applied: number): Promise<PartitionMemory> {
  const [records, aggregates, parkedBytes, deadLetterBytes, firstDead, sample, window, time] =
    await Promise.all([
      Promise.all([keys.processed, keys.applyCount, keys.appliedLog].map((key) => usage(redis, key))),
      countGuards(redis),
      usage(redis, keys.parked),
      usage(redis, keys.deadLetter),
      redis.lindex(keys.deadLetter, 0),
      // Flattened: some servers answer [field, value] pairs, others field, value, field, value…
      (redis.call('HRANDFIELD', keys.processed, String(RATE_SAMPLE), 'WITHVALUES') as Promise<unknown[]>).then(
        (reply) => reply.flat() as string[],
      ),
      readWindow(redis),
      redis.time(),
    ]);
  const markers = await Promise.all(
    sample
      .filter((_, i) => i % 2 === 0)
      .slice(0, MARKER_SAMPLE)
      .map((id) => usage(redis, keys.seen(id))),
  );
  const found = markers.filter((bytes) => bytes > 0);
  const perGuard = await guardBytesPerAggregate(redis, aggregatesOf(sample));
  const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  const deadAt = firstDead === null ? undefined : readEnvelope(firstDead)?.at;
  return {
    server: addressOf(serverOf(redis)),
    events,
    eventRecordBytes: records.reduce((a, b) => a + b, 0),
    markerBytes: found.length === 0 ? null : found.reduce((a, b) => a + b, 0) / found.length,
    aggregates,
    aggregateBytes: aggregates * (perGuard ?? 0),
    parkedBytes,
    deadLetterBytes,
    oldestDeadAt: deadAt ? deadAt : null,
    applied,
    rate: rateOf(sample, applied, now),
    windowFull: window.sweptEvents > 0 || window.sweptThrough > 0,
    now,
  };
}

function perEventOf(p: PartitionMemory): number {
  return p.events === 0 ? 0 : p.eventRecordBytes / p.events + (p.markerBytes ?? 0);
}

/**
 * What a partition adds per second: each event's records while the window fills (for good without
 * one), and a guard for the share of events that start an aggregate (aggregates / applied so far).
 */
function growthOf(p: PartitionMemory): number | null {
  if (p.rate === null) return p.events === 0 ? 0 : null;
  const newAggregates = p.applied === 0 ? 0 : Math.min(1, p.aggregates / p.applied);
  const perAggregate = p.aggregates === 0 ? 0 : p.aggregateBytes / p.aggregates;
  return p.rate.perSec * ((p.windowFull ? 0 : perEventOf(p)) + newAggregates * perAggregate);
}

/** The partitions' figures with their servers' INFO memory: bytes per event and aggregate, days until full. */
export async function memoryStatusOf(clients: readonly Redis[], parts: PartitionMemory[]): Promise<MemoryStatus> {
  const byServer = new Map<string, { node: Redis; partitions: number[] }>();
  parts.forEach((p, index) => {
    const entry = byServer.get(p.server) ?? { node: serverOf(clients[index]), partitions: [] };
    entry.partitions.push(index);
    byServer.set(p.server, entry);
  });
  const servers = await Promise.all(
    [...byServer].map(async ([address, { node, partitions }]): Promise<ServerMemory> => {
      const info = await node.info('memory');
      const usedMemory = infoNumber(info, 'used_memory');
      const maxmemory = infoNumber(info, 'maxmemory');
      const growths = partitions.map((i) => growthOf(parts[i]));
      const growth = growths.includes(null) ? null : (growths as number[]).reduce((a, b) => a + b, 0);
      const oom = maxmemory > 0 && usedMemory >= maxmemory;
      const days = oom ? 0 : maxmemory === 0 || !growth ? null : (maxmemory - usedMemory) / growth / (DAY_MS / 1000);
      return { address, partitions, usedMemory, maxmemory, oom, growthBytesPerSec: growth, daysUntilFull: days };
    }),
  );
  const sum = (pick: (p: PartitionMemory) => number) => parts.reduce((n, p) => n + pick(p), 0);
  const events = sum((p) => p.events);
  const aggregates = sum((p) => p.aggregates);
  const withMarkers = parts.filter((p) => p.markerBytes !== null);
  const markerSum = withMarkers.reduce((n, p) => n + p.markerBytes!, 0);
  const markerBytes = withMarkers.length === 0 ? 0 : markerSum / withMarkers.length;
  const rated = parts.filter((p) => p.rate !== null);
  const days = servers.map((s) => s.daysUntilFull).filter((d): d is number => d !== null);
  const oldest = Math.max(0, ...rated.map((p) => p.rate!.overMs));
  const sampled = `the applied counter's rise since the oldest of ${RATE_SAMPLE} sampled processed entries`;
  const growth = parts.some((p) => p.windowFull)
    ? 'rate x aggregates/applied x bytes/aggregate (the window sweeps the records)'
    : 'rate x (bytes/event while the window fills + aggregates/applied x bytes/aggregate)';
  return {
    servers,
    bytesPerEvent: events === 0 ? null : sum((p) => p.eventRecordBytes) / events + markerBytes,
    bytesPerAggregate: aggregates === 0 ? null : sum((p) => p.aggregateBytes) / aggregates,
    aggregates,
    eventsPerSec: rated.length === 0 ? null : rated.reduce((n, p) => n + p.rate!.perSec, 0),
    method: `rate: ${sampled} (${formatAge(oldest)}); growth: ${growth}`,
    daysUntilFull: days.length === 0 ? null : Math.min(...days),
  };
}

/** Parked and dead-lettered entries, their bytes and the oldest dead letter's age at Redis's clock. */
export function heldStatusOf(parts: PartitionMemory[], parked: number, deadLettered: number): HeldStatus {
  const ages = parts.filter((p) => p.oldestDeadAt !== null).map((p) => Math.max(0, p.now - p.oldestDeadAt!));
  return {
    parked,
    parkedBytes: parts.reduce((n, p) => n + p.parkedBytes, 0),
    deadLettered,
    deadLetterBytes: parts.reduce((n, p) => n + p.deadLetterBytes, 0),
    oldestDeadLetterAgeMs: ages.length === 0 ? null : Math.max(...ages),
  };
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function formatAge(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms ago`;
  return ms < 120_000 ? `${(ms / 1000).toFixed(1)} s ago` : `${Math.round(ms / 60_000)} min ago`;
}

function formatRate(perSec: number): string {
  return perSec >= 100 ? String(Math.round(perSec)) : perSec >= 1 ? perSec.toFixed(1) : perSec.toPrecision(2);
}

function formatDays(days: number): string {
  return days < 1 ? `${(days * 24).toFixed(1)} hours` : `${days.toFixed(1)} days`;
}

function formatServer(s: ServerMemory, several: boolean): string {
  const where = several ? `${s.address} (partitions ${s.partitions.join(', ')}): ` : '';
  const limit =
    s.maxmemory === 0 ? 'no maxmemory (grows until the machine runs out)' : `maxmemory ${formatBytes(s.maxmemory)}`;
  const growth = s.growthBytesPerSec === null ? 'growth unknown' : `growing ${formatBytes(s.growthBytesPerSec)}/s`;
  const days = s.daysUntilFull === null ? '' : `, ${formatDays(s.daysUntilFull)} until maxmemory`;
  const until = s.oom ? ', AT maxmemory' : days;
  return `${where}used ${formatBytes(s.usedMemory)} of ${limit}, ${growth}${until}`;
}

/** The memory lines of `outbox status`: per server, per event and aggregate, and how it was computed. */
export function formatMemory(m: MemoryStatus): string[] {
  const perEvent = m.bytesPerEvent === null ? 'none applied' : formatBytes(m.bytesPerEvent);
  const perAggregate = m.bytesPerAggregate === null ? 'none' : formatBytes(m.bytesPerAggregate);
  const rate = m.eventsPerSec === null ? 'rate unknown' : `${formatRate(m.eventsPerSec)} events/s`;
  return [
    ...m.servers.map((s, i) => `${i === 0 ? 'memory     ' : '           '} ${formatServer(s, m.servers.length > 1)}`),
    `            ${rate}; per event in the window ${perEvent}, ` +
      `per aggregate ${perAggregate} (${m.aggregates} aggregates)`,
    `            ${m.method}`,
  ];
}

/** The memory warnings: out of memory (writes refused), or maxmemory fewer than DAYS_WARNING days away. */
export function memoryAlerts(m: MemoryStatus): string[] {
  const where = (s: ServerMemory) => (m.servers.length > 1 ? ` at ${s.address}` : '');
  return m.servers.flatMap((s) => {
    if (s.oom) {
      return [
        `OOM: Redis${where(s)} is at maxmemory ` +
          `(used_memory ${formatBytes(s.usedMemory)} of ${formatBytes(s.maxmemory)}): ` +
          'it refuses writes, so the relay and consumers stop; raise maxmemory (CONFIG SET maxmemory) or free memory',
      ];
    }
    if (s.daysUntilFull !== null && s.daysUntilFull < DAYS_WARNING) {
      return [
        `Redis${where(s)} reaches maxmemory in ${formatDays(s.daysUntilFull)} at this rate ` +
          `(fewer than ${DAYS_WARNING} days), ` +
          'then refuses writes: raise maxmemory, or shorten the dedupe window (OUTBOX_DEDUPE_WINDOW)',
      ];
    }
    return [];
  });
}
