import type { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
import { keys } from './keys.js';
import { keyPrefixOfConnection } from './scan-keys.js';

/** The Lua scripts in ./lua, named `<name>-<numberOfKeys>.lua`. */
const SCRIPT_FILES = {
  applyEvents: 'apply-events-14.lua',
  claimStore: 'claim-store-10.lua',
  pushEvents: 'push-events-3.lua',
  deadLetter: 'dead-letter-3.lua',
  handlerFailed: 'handler-failed-4.lua',
  requeueDeadLetter: 'requeue-dead-letter-2.lua',
  requeueParked: 'requeue-parked-2.lua',
  raiseAppliedSeq: 'raise-applied-seq-4.lua',
  migrateGuards: 'migrate-guards-2.lua',
  readGuards: 'read-guards-1.lua',
  moveToProcessing: 'move-to-processing-3.lua',
  claimEvents: 'claim-event-11.lua',
  completeEvents: 'complete-event-12.lua',
  sweepWindow: 'sweep-window-5.lua',
  sweepHorizon: 'sweep-horizon-3.lua',
  partitionLease: 'partition-lease-1.lua',
  consumerMembers: 'consumer-members-1.lua',
} as const;

type ScriptName = keyof typeof SCRIPT_FILES;
type Args = (string | number | Buffer)[];

/** The commands `defineScripts` adds; reached only through the typed wrappers below. */
type ScriptClient = Record<ScriptName, (...args: Args) => Promise<unknown>> & { moveToProcessingBuffer: (...args: Args) => Promise<unknown> };

let sources: Record<ScriptName, { lua: string; numberOfKeys: number }> | undefined;

/** A script file's text, each `--- @include "<path>"` line (relative to ./lua) replaced by that file's text, as bullmq does: Redis runs one self-contained script. */
function scriptText(file: string): string {
  return readFileSync(new URL(`./lua/${file}`, import.meta.url), 'utf8').replace(/^--- @include "([^"]+)"$/gm, (_line, included: string) => scriptText(included));
}

function loadSources() {
  sources ??= Object.fromEntries(
    Object.entries(SCRIPT_FILES).map(([name, file]) => [
      name,
      {
        lua: scriptText(file),
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

export type ApplyOutcome = 'applied' | 'duplicate' | 'parked' | 'stale' | 'invalid' | 'foreign';

export interface EventToApply {
  /**
   * The message exactly as it sits in the processing list: its bytes as taken (sent as they are)
   * or its text (encoded as UTF-8 when sent).
   */
  raw: string | Buffer;
  eventId: string;
  /** The store the message comes from: applied only where Redis serves that store. */
  storeId: string;
  /** The aggregate key (what the applied-seq hash and parked fields use). */
  aggregate: string;
  seq: number;
  /** Its effects, each as `encodeEffect` gives it: op, key (relative to the namespace), field or member, value. */
  effects: (readonly [string, string, string, string])[];
  /** JSON object stored in the processed hash (the script adds applyOrder and appliedAt, Redis's TIME when it applied the event). */
  result: string;
  /** When the event was committed (ms since epoch), when its message says: tells an expired record from a taken seq. */
  createdAt?: number;
  /** When its aggregate's previous event was committed (0: not kept), when its message says: past the aggregate horizon. */
  prevCreatedAt?: number;
}

/** The script answers each event's outcome by its first letter. */
const OUTCOME_OF_LETTER: Record<string, ApplyOutcome> = { a: 'applied', d: 'duplicate', p: 'parked', s: 'stale', i: 'invalid', f: 'foreign' };

export interface ApplyResult {
  /** One per event, in order. */
  outcomes: ApplyOutcome[];
  /** Bad state the script met in Redis (a key of another type, a non-number where a count belongs, a corrupt parked entry). */
  problems: string[];
}

/** The dedupe markers' key prefix, namespace included: the scripts derive each marker's key from it. */
function markerPrefix(redis: Redis): string {
  return keyPrefixOfConnection(redis) + keys.seen('');
}

/** `text` with each lone surrogate replaced by U+FFFD (String.prototype.toWellFormed, Node 20; not in the ES2022 lib). */
function wellFormed(text: string): string {
  return (text as string & { toWellFormed(): string }).toWellFormed();
}

/** See lua/apply-events-14.lua: applies `events` and their effects in order, resolving one outcome per event. */
export async function applyEvents(redis: Redis, processingList: string, events: EventToApply[], markerTtlSeconds: number, horizonMs = 0): Promise<ApplyResult> {
  return sendApplyEvents(redis, applyEventsArgs(redis, processingList, events, markerTtlSeconds, horizonMs));
}

/** The keys and arguments of one apply-events call (apart so that `outbox bench` can time the script on arguments built beforehand). */
export function applyEventsArgs(redis: Redis, processingList: string, events: EventToApply[], markerTtlSeconds: number, horizonMs = 0): (string | Buffer)[] {
  // The markers' and the effects' keys are derived in the script, so their prefix carries the namespace itself.
  const namespace = keyPrefixOfConnection(redis);
  // The events' values in one JSON argument and the raw messages after it: ioredis pays for every
  // argument (it copies, measures and encodes each), far more than JSON.stringify for a value.
  // One flat array of strings (see the script's header): the script's decoder then makes one table,
  // not three per event.
  const flat: string[] = [];
  for (const e of events) {
    flat.push(e.eventId, e.aggregate, String(e.seq), e.storeId, e.result, String(e.createdAt ?? 0), String(e.prevCreatedAt ?? -1), String(e.effects.length));
    for (const f of e.effects) flat.push(f[0], f[1], f[2], f[3]);
  }
  let packed = JSON.stringify(flat);
  // A lone surrogate (a payload's "\ud800" passed on by a handler) is written as that escape, which
  // the script's JSON decoder refuses: replaced by U+FFFD, as a string argument's UTF-8 encoding
  // replaces it. (The test also meets an escaped backslash before "ud8": then only the work is redone.
  // The plain search first: it is the usual answer, and much cheaper than the regex over the whole text.)
  if (packed.includes('\\u') && /\\ud[89a-f]/i.test(packed)) packed = JSON.stringify(flat.map(wellFormed));
  const args: (string | Buffer)[] = [
    processingList,
    keys.processed,
    keys.appliedSeq,
    keys.parked,
    keys.stats,
    keys.events,
    keys.meta,
    keys.deadLetter,
    keys.applyCount,
    keys.attempts,
    keys.effectKeys,
    keys.appliedLog,
    keys.window,
    keys.aggregateLog,
    markerPrefix(redis),
    String(markerTtlSeconds),
    namespace,
    String(horizonMs),
    packed,
  ];
  // The messages as the take gave them, where it did: ioredis copies a Buffer argument as it is, and
  // encodes a string's UTF-8, with the round's other commands in one long string (the consumer's CPU
  // per event about 1 µs less with bytes, measured on 50,000-event drains).
  for (const e of events) args.push(e.raw);
  return args;
}

/** Runs apply-events with the arguments `applyEventsArgs` built. */
export async function sendApplyEvents(redis: Redis, args: (string | Buffer)[]): Promise<ApplyResult> {
  const [letters, problems] = (await client(redis).applyEvents(...args)) as [string, string[]];
  const outcomes: ApplyOutcome[] = new Array(letters.length);
  for (let i = 0; i < letters.length; i++) outcomes[i] = OUTCOME_OF_LETTER[letters[i]];
  return { outcomes, problems };
}

export type PushResult =
  /** `pushedAt`: Redis's clock (ms since epoch) when the messages reached the queue. */
  | { status: 'ok'; pushed: number; pushedAt: number }
  | { status: 'unclaimed' }
  | { status: 'foreign'; servedStore: string }
  /** The partition was claimed as another "i/P" than `layout`: the relay is configured for another number of partitions. */
  | { status: 'layout'; servedLayout: string };

/** The outbox row of a push's last message: the meta hash keeps the highest one ever pushed (see `assertNotBehind`, relay/store-pairing.ts). */
export interface PushedRow {
  id: number;
  eventId: string;
  aggregate: string;
  seq: number;
}

/**
 * See lua/push-events-3.lua: pushes `messages` of store `storeId` when this Redis (partition
 * `layout`, "i/P", see partitions.ts) serves that store.
 */
export async function pushEvents(redis: Redis, storeId: string, messages: string[], layout = '0/1', last?: PushedRow): Promise<PushResult> {
  const lastRow = last ? JSON.stringify([last.id, last.eventId, last.aggregate, last.seq]) : '';
  const [status, detail, pushedAt] = (await client(redis).pushEvents(keys.events, keys.enqueued, keys.meta, storeId, layout, lastRow, ...messages)) as [string, string | number, string?];
  if (status === 'ok') return { status, pushed: Number(detail), pushedAt: Number(pushedAt) };
  if (status === 'foreign') return { status, servedStore: String(detail) };
  if (status === 'layout') return { status, servedLayout: String(detail) };
  return { status: 'unclaimed' };
}

/** What a rebuild set back to PENDING and what it cannot rebuild; absent on first use. */
export interface RebuildRecord {
  republished: number;
  unrecoverable: number;
  /** Pruned aggregates and the seq they were pruned through: their applied seq after the claim. */
  pruned: { aggregate_id: string; through_seq: number }[];
}

/**
 * See lua/claim-store-10.lua. Resolves the store this Redis serves afterwards, and whether this call
 * claimed it. `layout`: the partition these keys hold, "i/P" (see partitions.ts).
 */
export async function claimStore(redis: Redis, storeId: string, rebuild?: RebuildRecord, layout = '0/1'): Promise<{ claimed: boolean; servedStore: string }> {
  const [status, served] = (await client(redis).claimStore(
    keys.meta,
    keys.processed,
    keys.appliedSeq,
    keys.effectKeys,
    keys.parked,
    keys.stats,
    keys.applyCount,
    keys.attempts,
    keys.appliedLog,
    keys.window,
    storeId,
    Date.now(),
    rebuild ? rebuild.republished : '',
    rebuild ? rebuild.unrecoverable : '',
    layout,
    ...(rebuild?.pruned ?? []).flatMap((p) => [p.aggregate_id, p.through_seq]),
  )) as [string, string];
  return { claimed: status === 'claimed', servedStore: served };
}

/** See lua/dead-letter-3.lua. Resolves true when this call moved the message. */
export async function deadLetter(redis: Redis, processingList: string, raw: string | Buffer, reason: string): Promise<boolean> {
  const moved = await client(redis).deadLetter(processingList, keys.deadLetter, keys.stats, raw, reason, Date.now());
  return moved === 1;
}

export interface HandlerFailure {
  /** 'retry': the message waits in the processing list; 'dead': dead-lettered; 'stale': it was not there. */
  status: 'retry' | 'dead' | 'stale';
  /** Failed attempts counted so far (0 when stale). */
  attempts: number;
}

/** See lua/handler-failed-4.lua: counts a failed attempt at an event; dead-letters it at `maxAttempts`. */
export async function handlerFailed(redis: Redis, processingList: string, raw: string, eventId: string, maxAttempts: number, error: string): Promise<HandlerFailure> {
  const [status, attempts] = (await client(redis).handlerFailed(processingList, keys.attempts, keys.deadLetter, keys.stats, raw, eventId, maxAttempts, error, Date.now())) as [
    HandlerFailure['status'],
    number,
  ];
  return { status, attempts };
}

/** What a requeue did: moved, not there (any more), or refused an entry that is not an envelope. */
export type RequeueResult = 'moved' | 'gone' | 'not an envelope';

const REQUEUE_RESULT: Record<number, RequeueResult> = { 1: 'moved', 0: 'gone', [-1]: 'not an envelope' };

/** See lua/requeue-dead-letter-2.lua. `entry` as stored, bytes included. */
export async function requeueDeadLetter(redis: Redis, entry: Buffer): Promise<RequeueResult> {
  return REQUEUE_RESULT[(await client(redis).requeueDeadLetter(keys.deadLetter, keys.events, entry)) as number];
}

/** See lua/requeue-parked-2.lua. */
export async function requeueParked(redis: Redis, field: string): Promise<RequeueResult> {
  return REQUEUE_RESULT[(await client(redis).requeueParked(keys.parked, keys.events, field)) as number];
}

/** See lua/raise-applied-seq-4.lua: whether the applied seq of `aggregate` was raised to `seq`, and what became of the event parked after it. */
export async function raiseAppliedSeq(redis: Redis, aggregate: string, seq: number): Promise<{ raised: boolean; requeued: RequeueResult }> {
  const [raised, requeued] = (await client(redis).raiseAppliedSeq(keys.appliedSeq, keys.parked, keys.events, keys.window, aggregate, String(seq))) as [number, number];
  return { raised: raised === 1, requeued: REQUEUE_RESULT[requeued] };
}

/** See lua/move-to-processing-3.lua: moves up to `count` messages to `processingList`, as bytes, and records the list in `keys.processingLists`. */
export async function moveToProcessing(redis: Redis, processingList: string, count: number): Promise<Buffer[]> {
  return (await client(redis).moveToProcessingBuffer(keys.events, processingList, keys.processingLists, count, processingList)) as Buffer[];
}

/** An event of database mode, as the claim and complete scripts take it. */
export interface EventToClaim {
  /** The message exactly as it sits in the processing list. */
  raw: string;
  eventId: string;
  storeId: string;
  /** The opaque aggregate key (applied-seq field, parked field prefix). */
  aggregate: string;
  seq: number;
  /** When the event was committed (ms since epoch), when its message says. */
  createdAt?: number;
}

export type ClaimOutcome = 'claimed' | 'busy' | 'duplicate' | 'parked' | 'foreign' | 'stale' | 'invalid';

export interface ClaimResult {
  outcomes: ClaimOutcome[];
  /** Per event: ms left of the other owner's lease when 'busy', else 0. */
  waits: number[];
  problems: string[];
}

/** See lua/claim-event-11.lua: claims `events` (at most one per aggregate) for `leaseMs` on behalf of `owner`. */
export async function claimEvents(redis: Redis, processingList: string, events: EventToClaim[], leaseMs: number, owner: string): Promise<ClaimResult> {
  const args: (string | number)[] = [markerPrefix(redis), leaseMs, owner];
  for (const e of events) args.push(e.raw, e.eventId, e.aggregate, e.seq, e.storeId, e.createdAt ?? 0);
  const [outcomes, waits, problems] = (await client(redis).claimEvents(
    processingList,
    keys.processed,
    keys.appliedSeq,
    keys.parked,
    keys.stats,
    keys.events,
    keys.meta,
    keys.deadLetter,
    keys.applyCount,
    keys.attempts,
    keys.window,
    ...args,
  )) as [ClaimOutcome[], number[], string[]];
  return { outcomes, waits, problems };
}

export type CompleteOutcome = 'applied' | 'duplicate' | 'foreign' | 'stale' | 'invalid';

/** See lua/complete-event-12.lua: records `events` whose effect the consumer's database committed, and acks them. */
export async function completeEvents(
  redis: Redis,
  processingList: string,
  events: (EventToClaim & { result: string })[],
  markerTtlSeconds: number,
): Promise<{ outcomes: CompleteOutcome[]; problems: string[] }> {
  const args: (string | number)[] = [markerPrefix(redis), markerTtlSeconds];
  for (const e of events) args.push(e.raw, e.eventId, e.aggregate, e.seq, e.storeId, e.result);
  const [outcomes, problems] = (await client(redis).completeEvents(
    processingList,
    keys.processed,
    keys.appliedSeq,
    keys.parked,
    keys.stats,
    keys.events,
    keys.meta,
    keys.deadLetter,
    keys.applyCount,
    keys.attempts,
    keys.appliedLog,
    keys.window,
    ...args,
  )) as [CompleteOutcome[], string[]];
  return { outcomes, problems };
}

/** See lua/migrate-guards-2.lua: moves at most `limit` guards of the old layout into buckets. */
export async function migrateGuardsOnce(redis: Redis, limit: number): Promise<[number, number]> {
  return (await client(redis).migrateGuards(keys.appliedSeq, keys.window, limit)) as [number, number];
}

/** See lua/sweep-window-5.lua: drops the records of events applied before the window, reading at most `limit` log entries. */
export async function sweepWindowOnce(redis: Redis, windowMs: number, limit: number): Promise<{ swept: number; more: boolean }> {
  const [swept, more] = (await client(redis).sweepWindow(keys.appliedLog, keys.processed, keys.applyCount, keys.attempts, keys.window, windowMs, limit)) as [number, number];
  return { swept, more: more === 1 };
}

/** See lua/sweep-horizon-3.lua: drops the guards of aggregates idle past the horizon, reading at most `limit` log entries. */
export async function sweepHorizonOnce(redis: Redis, horizonMs: number, limit: number): Promise<{ dropped: number; more: boolean }> {
  const [dropped, more] = (await client(redis).sweepHorizon(keys.aggregateLog, keys.appliedSeq, keys.window, horizonMs, limit)) as [number, number];
  return { dropped, more: more === 1 };
}

/** See lua/partition-lease-1.lua: resolves whether `owner` holds the partition's lease after the call. */
export async function partitionLease(redis: Redis, op: 'acquire' | 'renew' | 'release', owner: string, ttlMs: number): Promise<boolean> {
  return (await client(redis).partitionLease(keys.partitionLease, op, owner, ttlMs)) === 1;
}

/** See lua/consumer-members-1.lua: says `owner` is alive (or left); resolves the owners alive, sorted. */
export async function consumerMembers(redis: Redis, op: 'join' | 'leave', owner: string, ttlMs: number): Promise<string[]> {
  const members = (await client(redis).consumerMembers(keys.consumerMembers, op, ttlMs, owner)) as string[];
  return members.sort();
}
