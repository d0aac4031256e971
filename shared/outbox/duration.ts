import { InvalidInputError } from './errors/invalid-input-error.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * "60s", "500ms", "1.5m", "7d" -> milliseconds. The unit is required: a bare "7" once meant 7
 * seconds and made `prune --older-than 7` delete a week's worth of rows meant to stay. Zero is
 * allowed ("0s": no window), a negative value is not. Whole milliseconds, unless `fractional`
 * (a simulated CPU cost of "0.2ms").
 */
export function parseDuration(raw: string, name: string, { fractional = false } = {}): number {
  const got = `${name} must be a duration like 60s, 500ms or 2m, got ${JSON.stringify(raw)}`;
  const match = /^(-?)(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(raw.trim());
  if (!match) throw new InvalidInputError(`${got}: write a number and a unit (ms, s, m, h or d)`);
  const [, minus, amount, unit] = match;
  if (minus !== '') throw new InvalidInputError(`${got}, which is negative: write 0s or more, e.g. 7d`);
  if (unit === undefined) {
    const written = Object.keys(UNITS).map((u) => `${amount}${u}`);
    throw new InvalidInputError(`${got} without a unit: write ${written.slice(0, -1).join(', ')} or ${written.at(-1)}`);
  }
  const ms = Number(amount) * UNITS[unit];
  return fractional ? ms : Math.round(ms);
}

/** Milliseconds as a duration parseDuration reads back: "5s", "1500ms". */
export function formatDuration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}
