import type { Redis } from 'ioredis';
import { migrateGuards } from './guards.js';
import { keys } from './keys.js';
import { sweepHorizonOnce, sweepWindowOnce } from './scripts.js';
import type { Logger } from '../logger.js';

/** How long an applied event's records are kept by default: 7 days, as NServiceBus and Orleans keep theirs. */
export const DEFAULT_DEDUPE_WINDOW_MS = 7 * 24 * 3600_000;

/** Log entries one sweep call reads: a call stays well under a millisecond or two of Redis time. */
const SWEEP_ENTRIES = 500;

/** The dedupe marker's TTL for a window: whole seconds, at least one. */
export function markerTtlOf(windowMs: number): number {
  return Math.max(1, Math.ceil(windowMs / 1000));
}

/** What one partition's window hash says. */
export interface WindowState {
  /** The window the last sweep used, ms; null before any sweep. */
  windowMs: number | null;
  /** Events whose processed entry and apply count the sweeps dropped. */
  sweptEvents: number;
  /** Redis's clock (ms) up to which the sweeps dropped the records of the events applied by then; 0 for none. */
  sweptThrough: number;
  /** With an aggregate horizon: the apply time up to which idle aggregates' guards were dropped; 0 for none. */
  droppedThrough: number;
  /** Guards the horizon's sweeps dropped. */
  droppedGuards: number;
}

/** The window hash's fields, in the order `windowStateOf` reads their values. */
export const WINDOW_FIELDS = ['windowMs', 'sweptEvents', 'sweptThrough', 'droppedThrough', 'droppedGuards'] as const;

/** Reads one partition's window hash. */
export async function readWindow(redis: Redis): Promise<WindowState> {
  return windowStateOf(await redis.hmget(keys.window, ...WINDOW_FIELDS));
}

/** The window hash's WINDOW_FIELDS values (HMGET) as a state; missing or bad ones are 0. */
export function windowStateOf(values: (string | null)[]): WindowState {
  const [windowMs, sweptEvents, sweptThrough, droppedThrough, droppedGuards] = values;
  const number = (text: string | null) => (text !== null && Number.isFinite(Number(text)) ? Number(text) : 0);
  return {
    windowMs: windowMs === null ? null : number(windowMs),
    sweptEvents: number(sweptEvents),
    sweptThrough: number(sweptThrough),
    droppedThrough: number(droppedThrough),
    droppedGuards: number(droppedGuards),
  };
}

/**
 * Whether the guard of an event's aggregate, absent, was dropped past the horizon with the event
 * applied: committed at or before the horizon's sweeps reached (docs/dedupe-window.md).
 */
export function guardDropped(createdAt: number, window: WindowState): boolean {
  return window.droppedThrough > 0 && createdAt <= window.droppedThrough;
}

/**
 * Whether an event committed at `createdAt` may have had its records swept: its processed entry
 * and apply count missing then say nothing, and its seq guard is the evidence it was applied.
 */
export function mayBeSwept(createdAt: number, window: WindowState): boolean {
  return window.sweptThrough > 0 && createdAt <= window.sweptThrough;
}

/**
 * Moves guards of the layout before buckets into buckets (guards.ts), once, then
 * drops the records of the events applied before the window (sweep-window-5.lua) and, with a
 * horizon, the guards of the aggregates idle past it (sweep-horizon-3.lua), in calls that each read
 * a few hundred log entries, until none is due. Resolves how many events' records went.
 */
export async function sweepWindow(redis: Redis, windowMs: number, horizonMs = 0): Promise<number> {
  if ((await redis.exists(keys.appliedSeq)) === 1) await migrateGuards(redis);
  let swept = 0;
  for (let more = true; more; ) {
    const result = await sweepWindowOnce(redis, windowMs, SWEEP_ENTRIES);
    swept += result.swept;
    more = result.more;
  }
  for (let more = horizonMs > 0; more; ) more = (await sweepHorizonOnce(redis, horizonMs, SWEEP_ENTRIES)).more;
  return swept;
}

/**
 * Sweeps on a timer, a tenth of the window apart (1 s to 1 min), so that records outlive the
 * window by at most that. Resolves a stop function. A failed sweep is logged once until one works.
 */
export function startWindowSweeps(redis: Redis, windowMs: number, log: Logger, horizonMs = 0): () => void {
  const everyMs = Math.min(60_000, Math.max(1000, Math.round(windowMs / 10)));
  let running = false;
  let failing = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    sweepWindow(redis, windowMs, horizonMs)
      .then(
        (swept) => {
          failing = false;
          if (swept > 0) log.debug('dedupe window swept', { swept });
        },
        (error: Error) => {
          if (!failing) log.warn('cannot sweep the dedupe window, will retry', { error: error.message });
          failing = true;
        },
      )
      .finally(() => (running = false));
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
