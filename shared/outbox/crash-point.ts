import { appendFileSync, readFileSync, writeSync } from 'node:fs';

/**
 * Named places where the process can be made to die at once (SIGKILL to itself), to prove that a
 * crash there loses nothing. Off unless the comma-separated env `OUTBOX_CRASH_POINTS` names them
 * (or `enableCrashPoint` does); when none is enabled a crash point costs one Set lookup.
 *
 * - By default an enabled point fires the first time it is reached.
 * - With `OUTBOX_CRASH_MODE=armed` it fires only after the process received SIGUSR2, once: this is
 *   how `outbox chaos` picks the moment, so a restarted process does not crash again at once.
 * - With `OUTBOX_CRASH_ARM_FILE=<file>` as well, SIGUSR2 arms only the points that file names
 *   (comma-separated, read when the signal arrives; all enabled points when it is missing or
 *   empty): how a chaos run picks the point too, e.g. `consumer.after-commit` rather than the
 *   `consumer.after-claim` every event reaches first.
 * - `OUTBOX_CRASH_LOG=<file>` gets one line with the point's name before the process dies.
 */
export const CRASH_POINTS = [
  'producer.mid-transaction',
  'relay.after-push',
  'relay.mid-batch',
  'consumer.after-lmove',
  'consumer.after-apply',
  'consumer.after-claim',
  'consumer.after-commit',
  'consumer.after-processed',
] as const;

export type CrashPointName = (typeof CRASH_POINTS)[number];

const enabled = new Set(
  (process.env.OUTBOX_CRASH_POINTS ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean),
);
const armedMode = process.env.OUTBOX_CRASH_MODE === 'armed';
/** Armed mode: false until SIGUSR2, then true (every enabled point) or the points the arm file named. */
let armed: boolean | Set<string> = false;

function pointsToArm(): true | Set<string> {
  const file = process.env.OUTBOX_CRASH_ARM_FILE;
  if (!file) return true;
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return true;
  }
  const names = text.split(',').map((name) => name.trim()).filter(Boolean);
  return names.length === 0 ? true : new Set(names);
}

if (enabled.size > 0 && armedMode) process.on('SIGUSR2', () => (armed = pointsToArm()));

export function enableCrashPoint(name: CrashPointName): void {
  enabled.add(name);
}

export function crashPoint(name: CrashPointName, announce?: () => string): void {
  if (crashPointFires(name)) crashNow(name, announce);
}

/**
 * Whether `crashPoint(name)` would fire now. Asked in the main thread for a point that a worker
 * thread reaches (the relay's mark thread): SIGUSR2 arms the main thread's points only.
 */
export function crashPointFires(name: CrashPointName): boolean {
  return enabled.has(name) && !(armedMode && (armed === false || (armed !== true && !armed.has(name))));
}

/** Logs the point and kills the whole process (from any thread): what a firing crash point does. */
export function crashNow(name: CrashPointName, announce?: () => string): void {
  if (process.env.OUTBOX_CRASH_LOG) appendFileSync(process.env.OUTBOX_CRASH_LOG, `${name}\n`);
  // Straight to fd 2: a worker thread's process.stderr goes through the main thread, which the kill stops.
  if (announce) writeSync(2, `${announce()}\n`);
  process.kill(process.pid, 'SIGKILL');
}
