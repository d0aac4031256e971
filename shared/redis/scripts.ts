import type { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
import { keys } from './keys.js';

/** The Lua scripts in ./lua, named `<name>-<numberOfKeys>.lua`. */
const SCRIPT_FILES = {
  applyEvents: 'apply-events-7.lua',
  deadLetter: 'dead-letter-3.lua',
  requeueDeadLetter: 'requeue-dead-letter-2.lua',
  requeueParked: 'requeue-parked-2.lua',
  take: 'take-2.lua',
} as const;

type ScriptName = keyof typeof SCRIPT_FILES;
type Args = (string | number | Buffer)[];

/** The commands `defineScripts` adds; reached only through the typed wrappers below. */
type ScriptClient = Record<ScriptName, (...args: Args) => Promise<unknown>> & { takeBuffer: (...args: Args) => Promise<unknown> };

let sources: Record<ScriptName, { lua: string; numberOfKeys: number }> | undefined;

function loadSources() {
  sources ??= Object.fromEntries(
    Object.entries(SCRIPT_FILES).map(([name, file]) => [
      name,
      {
        lua: readFileSync(new URL(`./lua/${file}`, import.meta.url), 'utf8'),
        numberOfKeys: Number(/-(\d+)\.lua$/.exec(file)![1]),
      },
    ]),
  ) as NonNullable<typeof sources>;
  return sources;
}

/** Registers every script on the client (EVALSHA with EVAL fallback, via ioredis). */
export function defineScripts(redis: Redis): void {
  for (const [name, source] of Object.entries(loadSources())) {
    redis.defineCommand(name, source);
  }
}

function client(redis: Redis): ScriptClient {
  return redis as unknown as ScriptClient;
}

export type ApplyOutcome = 'applied' | 'duplicate' | 'parked' | 'stale' | 'invalid';

export interface EventToApply {
  /** The message exactly as it sits in the processing list. */
  raw: string;
  eventId: string;
  aggregateId: number;
  seq: number;
  sku: string;
  delta: number;
  /** JSON object stored in the processed hash (the script adds applyOrder and appliedAt). */
  result: string;
}

/** See lua/apply-events-7.lua: applies `events` in order, resolving one outcome per event. */
export async function applyEvents(redis: Redis, processingList: string, events: EventToApply[], dedupeTtlSeconds: number): Promise<ApplyOutcome[]> {
  const args: (string | number)[] = [keys.seen(''), dedupeTtlSeconds, Date.now()];
  for (const e of events) args.push(e.raw, e.eventId, e.aggregateId, e.seq, e.sku, e.delta, e.result);
  return (await client(redis).applyEvents(
    processingList,
    keys.processed,
    keys.appliedSeq,
    keys.inventory,
    keys.parked,
    keys.stats,
    keys.events,
    ...args,
  )) as ApplyOutcome[];
}

/** See lua/dead-letter-3.lua. Resolves true when this call moved the message. */
export async function deadLetter(redis: Redis, processingList: string, raw: string | Buffer, reason: string): Promise<boolean> {
  const moved = await client(redis).deadLetter(processingList, keys.deadLetter, keys.stats, raw, reason, Date.now());
  return moved === 1;
}

/** See lua/requeue-dead-letter-2.lua. Resolves true when this call moved the entry. */
export async function requeueDeadLetter(redis: Redis, entry: string): Promise<boolean> {
  return (await client(redis).requeueDeadLetter(keys.deadLetter, keys.events, entry)) === 1;
}

/** See lua/requeue-parked-2.lua. Resolves true when this call moved the event. */
export async function requeueParked(redis: Redis, field: string): Promise<boolean> {
  return (await client(redis).requeueParked(keys.parked, keys.events, field)) === 1;
}

/** See lua/take-2.lua: moves up to `count` messages to `processingList`, as bytes. */
export async function take(redis: Redis, processingList: string, count: number): Promise<Buffer[]> {
  return (await client(redis).takeBuffer(keys.events, processingList, count)) as Buffer[];
}
