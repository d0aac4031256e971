import type { Options } from 'yargs';
import { parseDuration } from '../../outbox/duration.js';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';

/**
 * One setting of an app or command, defined once: its environment variable, its command-line
 * flag, its default (written as a user would write it) and how its text becomes a value. The
 * apps read the flag, else the variable, else the default; an error names whichever was set.
 */
export interface Setting<T> {
  /** The environment variable, e.g. `OUTBOX_RELAY_SLICE`; none for a flag that only commands take. */
  env?: string;
  /** The flag without its dashes, e.g. `slice`; none for a setting only the environment sets. */
  flag?: string;
  /** The value when neither is set, as a user would write it (`1.5s`), or computed from the environment and the flags. */
  default: string | ((env: NodeJS.ProcessEnv, argv: Argv) => string);
  /** How `outbox --help` and the docs describe the default when it is computed. */
  defaultText?: string;
  /** The values it takes, in words (`1–64`, `100ms–10m`), for docs/reference/configuration.md; the kinds below set it. */
  range?: string;
  describe: string;
  /** Text -> value; throws an `InvalidInputError` that starts with `name`. */
  parse: (raw: string, name: string) => T;
  /** Names the variable had before (`OUTBOX_RELAY_SLICE_MS`): still set, they are refused, not ignored. */
  retired?: string[];
}

export type Settings = Record<string, Setting<unknown>>;
export type ValuesOf<S extends Settings> = { [K in keyof S]: S[K] extends Setting<infer T> ? T : never };

/** What was given for each setting: the text and the name it was given under (the flag, the variable, or the default). */
export type Given<S extends Settings> = { [K in keyof S]: { raw: string; from: string } };

export type Argv = Record<string, unknown>;

const flagName = (flag: string) => `--${flag}`;

/** `--slice / OUTBOX_RELAY_SLICE`: both names, for help texts. */
function bothNames(setting: Setting<unknown>): string {
  return [setting.flag && flagName(setting.flag), setting.env].filter(Boolean).join(' / ');
}

/**
 * Refuses a retired variable that is still set (naming its new name), then picks each setting's
 * text: the flag when given, else the variable when set and not empty, else the default.
 */
export function withDefaults<S extends Settings>(settings: S, argv: Argv = {}, env: NodeJS.ProcessEnv = process.env): Given<S> {
  for (const setting of Object.values(settings)) {
    for (const old of setting.retired ?? []) {
      const value = env[old];
      if (value === undefined) continue;
      const suggested = /^\s*\d+(\.\d+)?\s*$/.test(value) ? `${value.trim()}ms` : defaultOf(setting, env, argv);
      throw new InvalidInputError(`${old} is no longer read: set ${setting.env}=${suggested} instead (durations take a unit) and unset ${old}`);
    }
  }
  const given = {} as Given<S>;
  for (const [key, setting] of Object.entries(settings) as [keyof S, Setting<unknown>][]) {
    const flagValue = setting.flag === undefined ? undefined : argv[setting.flag];
    const envValue = setting.env === undefined ? undefined : env[setting.env];
    if (flagValue !== undefined) given[key] = { raw: String(flagValue), from: flagName(setting.flag!) };
    else if (envValue !== undefined && envValue !== '') given[key] = { raw: envValue, from: setting.env! };
    else given[key] = { raw: defaultOf(setting, env, argv), from: `${bothNames(setting)} (default)` };
  }
  return given;
}

function defaultOf(setting: Setting<unknown>, env: NodeJS.ProcessEnv, argv: Argv): string {
  return typeof setting.default === 'function' ? setting.default(env, argv) : setting.default;
}

/** Parses every setting; the first bad one throws, naming where it was given. */
export function validate<S extends Settings>(settings: S, given: Given<S>): ValuesOf<S> {
  const values = {} as ValuesOf<S>;
  for (const key of Object.keys(settings) as (keyof S)[]) {
    values[key] = settings[key].parse(given[key].raw, given[key].from) as ValuesOf<S>[typeof key];
  }
  return values;
}

/** `validate(withDefaults(…))`: the typed values, checked before anything connects or listens. */
export function readSettings<S extends Settings>(settings: S, argv: Argv = {}, env: NodeJS.ProcessEnv = process.env): ValuesOf<S> {
  return validate(settings, withDefaults(settings, argv, env));
}

/**
 * The yargs options of the settings that have a flag. Every one is a string with no yargs default
 * (so that an unset flag falls through to the variable, and `1.5s` is never read as a number);
 * `requiresArg` lets `--slice -1s` reach the check instead of being read as flags.
 */
export function flagOptions(settings: Settings): Record<string, Options> {
  const options: Record<string, Options> = {};
  for (const setting of Object.values(settings)) {
    if (setting.flag === undefined) continue;
    const shownDefault = setting.defaultText ?? (typeof setting.default === 'string' ? setting.default : '');
    const where = [setting.env && `env ${setting.env}`, shownDefault && `default ${shownDefault}`].filter(Boolean).join(', ');
    options[setting.flag] = { type: 'string', requiresArg: true, describe: `${setting.describe}${where ? ` [${where}]` : ''}` };
  }
  return options;
}

/** The same setting for a CLI command: the same flag and checks, its own default, no variable (the variables configure the apps). */
export function forCommand<T>(setting: Setting<T>, defaultValue: string = setting.default as string): Setting<T> {
  return { ...setting, env: undefined, retired: undefined, default: defaultValue, defaultText: undefined };
}

// Kinds of setting.

interface Common {
  env?: string;
  flag?: string;
  describe: string;
  defaultText?: string;
  range?: string;
  retired?: string[];
}

/**
 * A duration with a unit (`200ms`, `1.5s`, `7d`), in ms, from `min` to `max` ms. `fractional`
 * keeps fractions of a millisecond (`0.2ms`). `off` (when allowed) gives undefined.
 */
export function duration(spec: Common & { default: string; min?: number; max?: number; fractional?: boolean }): Setting<number> {
  const { min = 0, max = Number.MAX_SAFE_INTEGER } = spec;
  const unbounded = max === Number.MAX_SAFE_INTEGER;
  return {
    range: `a duration${unbounded ? (min === 0 ? '' : ` of at least ${showMs(min)}`) : ` from ${showMs(min)} to ${showMs(max)}`}${spec.fractional ? ' (fractions of a ms kept)' : ''}`,
    ...spec,
    parse(raw, name) {
      const ms = parseDuration(raw, name, { fractional: spec.fractional });
      if (ms < min || ms > max) {
        const range = max === Number.MAX_SAFE_INTEGER ? `of at least ${showMs(min)}` : `from ${showMs(min)} to ${showMs(max)}`;
        throw new InvalidInputError(`${name} must be a duration ${range}, got ${JSON.stringify(raw)}`);
      }
      return ms;
    },
  };
}

/** Like `duration`, or `off` (the default) for undefined: a feature that is off unless set. */
export function optionalDuration(spec: Common & { min?: number; max?: number }): Setting<number | undefined> {
  const inner = duration({ ...spec, default: 'off' });
  return { ...inner, range: spec.range ?? `${inner.range}, or off`, default: 'off', parse: (raw, name) => (raw.trim() === 'off' ? undefined : inner.parse(raw, name)) };
}

/** A whole number from `min` to `max` (a batch size, a thread count, a port). */
export function count(spec: Common & { default: string; min: number; max: number }): Setting<number> {
  return {
    range: `a whole number from ${spec.min} to ${spec.max}`,
    ...spec,
    parse(raw, name) {
      const value = /^\s*-?\d+\s*$/.test(raw) ? Number(raw) : NaN;
      if (!Number.isSafeInteger(value) || value < spec.min || value > spec.max) {
        throw new InvalidInputError(`${name} must be a whole number from ${spec.min} to ${spec.max}, got ${JSON.stringify(raw)}`);
      }
      return value;
    },
  };
}

const SIZE_UNITS: Record<string, number> = {
  b: 1, k: 1024, kb: 1024, m: 1024 ** 2, mb: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, t: 1024 ** 4, tb: 1024 ** 4,
};

/** A size with a unit (`512KB`, `10MB`, `1GB`; K, M, G, T alone too; 1 KB = 1024 bytes), in bytes, `min` to `max`. */
export function size(spec: Common & { default: string; min: number; max: number }): Setting<number> {
  return {
    range: `a size with a unit (B, KB, MB, GB, TB; 1 KB = 1024 bytes) from ${showBytes(spec.min)} to ${showBytes(spec.max)}`,
    ...spec,
    parse(raw, name) {
      const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i.exec(raw);
      const unit = match ? SIZE_UNITS[match[2].toLowerCase()] : undefined;
      const bytes = match && unit !== undefined ? Math.floor(Number(match[1]) * unit) : NaN;
      if (!(bytes >= spec.min && bytes <= spec.max)) {
        const range = `(B, KB, MB, GB, TB) from ${showBytes(spec.min)} to ${showBytes(spec.max)}`;
        const message = `${name} must be a size with a unit ${range}, e.g. 10MB`;
        throw new InvalidInputError(`${message}, got ${JSON.stringify(raw)}`);
      }
      return bytes;
    },
  };
}

/** Text checked by `check` (which returns why it is wrong, or undefined). */
export function text(spec: Common & { default: Setting<string>['default']; check?: (value: string) => string | undefined }): Setting<string> {
  return {
    ...spec,
    parse(raw, name) {
      const problem = spec.check?.(raw);
      if (problem !== undefined) throw new InvalidInputError(`${name} ${problem}, got ${JSON.stringify(raw)}`);
      return raw;
    },
  };
}

/** One of `choices`. */
export function choice<C extends string>(spec: Common & { default: C; choices: readonly C[] }): Setting<C> {
  return text({ range: `one of ${spec.choices.join(', ')}`, ...spec, check: (value) => (spec.choices.includes(value as C) ? undefined : `must be one of ${spec.choices.join(', ')}`) }) as Setting<C>;
}

/** A setting parsed by its own function (which throws naming `name`). */
export function custom<T>(spec: Common & { default: Setting<T>['default']; parse: (raw: string, name: string) => T }): Setting<T> {
  return spec;
}

function showMs(ms: number): string {
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function showBytes(bytes: number): string {
  for (const [unit, size] of [['TB', 1024 ** 4], ['GB', 1024 ** 3], ['MB', 1024 ** 2], ['KB', 1024]] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  return `${bytes}B`;
}
