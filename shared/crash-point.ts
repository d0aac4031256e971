/**
 * Named places where the process can be made to die at once (SIGKILL to itself), to prove that a
 * crash there loses nothing. Enabled by the comma-separated env `OUTBOX_CRASH_POINTS` or by
 * `enableCrashPoint`; when none is enabled a crash point costs one Set lookup.
 */
export type CrashPointName =
  | 'producer.mid-transaction'
  | 'relay.after-push'
  | 'consumer.after-lmove';

const enabled = new Set(
  (process.env.OUTBOX_CRASH_POINTS ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean),
);

export function enableCrashPoint(name: CrashPointName): void {
  enabled.add(name);
}

export function crashPoint(name: CrashPointName, announce?: () => string): void {
  if (!enabled.has(name)) return;
  if (announce) process.stderr.write(`${announce()}\n`);
  process.kill(process.pid, 'SIGKILL');
}
