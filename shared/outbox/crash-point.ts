import { appendFileSync } from 'node:fs';

/**
 * Named places where the process can be made to die at once (SIGKILL to itself), to prove that a
 * crash there loses nothing. Off unless the comma-separated env `OUTBOX_CRASH_POINTS` names them
 * (or `enableCrashPoint` does); when none is enabled a crash point costs one Set lookup.
 *
 * - By default an enabled point fires the first time it is reached.
 * - With `OUTBOX_CRASH_MODE=armed` it fires only after the process received SIGUSR2, once: this is
 *   how `outbox chaos` picks the moment, so a restarted process does not crash again at once.
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
let armed = false;
if (enabled.size > 0 && armedMode) process.on('SIGUSR2', () => (armed = true));

export function enableCrashPoint(name: CrashPointName): void {
  enabled.add(name);
}

export function crashPoint(name: CrashPointName, announce?: () => string): void {
  if (!enabled.has(name) || (armedMode && !armed)) return;
  if (process.env.OUTBOX_CRASH_LOG) appendFileSync(process.env.OUTBOX_CRASH_LOG, `${name}\n`);
  if (announce) process.stderr.write(`${announce()}\n`);
  process.kill(process.pid, 'SIGKILL');
}
