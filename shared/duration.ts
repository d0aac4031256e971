import { InvalidInputError } from './errors/invalid-input-error.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "60s", "2s", "500ms", "1.5m", "7d" -> milliseconds; a bare number is seconds. */
export function parseDuration(raw: string, name: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(raw.trim());
  if (!match) throw new InvalidInputError(`${name} must be a duration like 60s, 500ms or 2m, got ${JSON.stringify(raw)}`);
  return Math.round(Number(match[1]) * UNITS[match[2] ?? 's']);
}
