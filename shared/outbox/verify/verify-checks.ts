import type { Database } from 'better-sqlite3';
import type { Redis } from 'ioredis';
import type { Pool, PoolClient } from 'pg';
import { ConfigError } from '../errors/config-error.js';

/** One row of `outbox verify`'s table. */
export interface InvariantCheck {
  name: string;
  expected: string;
  actual: string;
  /** 'info' rows are shown but never fail the run. */
  status: 'ok' | 'FAIL' | 'info';
  /** A few offending ids, for the reader to look at. */
  examples?: string[];
}

/** How many examples a row shows. */
export const EXAMPLES = 5;

/** A row comparing two figures: ok when they are equal, FAIL (with the first examples) when not. */
export function invariantCheck(name: string, expected: number | string, actual: number | string, examples: string[] = []): InvariantCheck {
  const ok = String(expected) === String(actual);
  return { name, expected: String(expected), actual: String(actual), status: ok ? 'ok' : 'FAIL', examples: ok ? undefined : examples.slice(0, EXAMPLES) };
}

/** An outbox event as verify read it from the producer database (the payload parsed from its JSON). */
export interface VerifiedEvent {
  eventId: string;
  /** The aggregate key, e.g. `account:acct-1`. */
  aggregate: string;
  seq: number;
  type: string;
  payload: unknown;
}

/**
 * What a check gets. verify judges the events of its snapshot (every outbox row up to its
 * horizon, the newest row when it first looked) and, with a settle window, looks again once they
 * were applied; the fields `snapshot` to `appliedPastHorizon` are from the look it judges.
 * `store` says which producer store verify runs on, and so what `producer` is: narrow on it
 * (`if (store !== 'sqlite') ...`) before reading `producer`.
 */
export type VerifyContext<S = undefined> = VerifyContextOfAnyStore<S> & VerifyProducer;

/** The producer's database (the one with the outbox), on the store verify runs on. */
export type VerifyProducer =
  /** app.db: read it in a transaction of your own for one consistent look. */
  | { store: 'sqlite'; producer: Database }
  /** PostgreSQL (`--database` / OUTBOX_DATABASE_URL): verify's pool; a transaction of your own is `await producer.connect()` then BEGIN. */
  | { store: 'postgres'; producer: Pool };

/** The part of a check's context that is the same on either store. */
export interface VerifyContextOfAnyStore<S = undefined> {
  /** Database mode: the consumer's own database (`--consumer-db`), opened read-only; undefined in Redis mode. */
  consumer: Database | undefined;
  /** Redis, in the deployment's namespace (keys are named without it). */
  redis: Redis;
  /** What the check set's snapshot read (`snapshot.producer` on app.db, `snapshot.postgres` on PostgreSQL) returned, read in verify's snapshot transaction (undefined without one). */
  snapshot: S;
  /** The check set's `snapshot.counterHashes`, read in one MULTI with the consumer's state: each hash's fields at one instant. */
  counters: Record<string, Record<string, string>>;
  /**
   * Events the snapshot transaction saw beyond the horizon (committed after verify's first look):
   * what `snapshot` holds beyond the events verify judges.
   */
  pastHorizon: VerifiedEvent[];
  /**
   * Events beyond the horizon that the consumer had applied by the instant `counters` were read.
   * A Redis effect at that instant = what `snapshot` implies, less the effects of `pastHorizon`,
   * plus the effects of `appliedPastHorizon`: exact under traffic.
   */
  appliedPastHorizon: VerifiedEvent[];
  /** Events up to the horizon not applied yet when verify judged (0 once it drained; otherwise its own rows fail). */
  inFlight: number;
  /** Events beyond the horizon not applied yet (traffic): not judged by verify. */
  newerInFlight: number;
}

/** One named check: resolves one row or several. A throw is reported as a failed row naming the check. */
export type VerifyCheck<S = undefined> = (context: VerifyContext<S>) => InvariantCheck | InvariantCheck[] | Promise<InvariantCheck | InvariantCheck[]>;

/** Invariants of one domain, run by `outbox verify --checks <module>` (the module's default export) after its own checks. */
export interface VerifyCheckSet<S = undefined> {
  /** Names the set in messages, e.g. `payments`. */
  name: string;
  /** Optional reads taken within verify's snapshot, for checks that compare the producer with Redis effects under traffic. */
  snapshot?: {
    /** On app.db: runs inside verify's SQLite read transaction of the snapshot it judges; synchronous. */
    producer?: (db: Database) => S;
    /**
     * On PostgreSQL: runs inside verify's snapshot transaction (REPEATABLE READ, READ ONLY) on its
     * `client`; every query on it sees the snapshot verify judges. A set with a snapshot read runs
     * on the store it has a read for: verify refuses it on the other (exit 2).
     */
    postgres?: (client: PoolClient) => S | Promise<S>;
    /** Hashes of integer counters (your HINCRBY effects) read at the consumer-state instant; a field that is not an integer is a corrupt entry. */
    counterHashes?: readonly string[];
  };
  /** Check name -> check. */
  checks: Record<string, VerifyCheck<S>>;
}

/** What is wrong with `value` as a check set, or undefined when it is one. Structural: sets from another copy of the library pass. */
export function checkSetProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return `expected an object made by defineVerifyChecks, got ${value === null ? 'null' : typeof value}`;
  const set = value as Partial<VerifyCheckSet<unknown>>;
  if (typeof set.name !== 'string' || set.name.trim() === '') return 'its name must be a non-empty string';
  if (typeof set.checks !== 'object' || set.checks === null) return `${set.name}: checks must be an object of named functions`;
  const names = Object.keys(set.checks);
  if (names.length === 0) return `${set.name}: it has no checks`;
  const notFunction = names.find((n) => typeof (set.checks as Record<string, unknown>)[n] !== 'function');
  if (notFunction !== undefined) return `${set.name}: check "${notFunction}" is not a function`;
  if (set.snapshot !== undefined) {
    if (typeof set.snapshot !== 'object' || set.snapshot === null) return `${set.name}: snapshot must be an object`;
    if (set.snapshot.producer !== undefined && typeof set.snapshot.producer !== 'function') return `${set.name}: snapshot.producer must be a function`;
    if (set.snapshot.postgres !== undefined && typeof set.snapshot.postgres !== 'function') return `${set.name}: snapshot.postgres must be a function`;
    const hashes = set.snapshot.counterHashes;
    if (hashes !== undefined && !(Array.isArray(hashes) && hashes.every((k) => typeof k === 'string' && k !== ''))) {
      return `${set.name}: snapshot.counterHashes must be an array of key names`;
    }
  }
  return undefined;
}

/**
 * Why `set` cannot run on `store`: it reads the producer in its snapshot on the other store only
 * (verify would judge it without the snapshot its checks need). Undefined when it can.
 */
export function checkSetStoreProblem(set: VerifyCheckSet<unknown>, store: VerifyProducer['store']): string | undefined {
  const snapshot = set.snapshot;
  if (snapshot === undefined || (snapshot.producer === undefined && snapshot.postgres === undefined)) return undefined;
  if (store === 'postgres' && snapshot.postgres === undefined) return `${set.name} reads app.db in its snapshot (snapshot.producer) and has no snapshot.postgres for PostgreSQL`;
  if (store === 'sqlite' && snapshot.producer === undefined) return `${set.name} reads PostgreSQL in its snapshot (snapshot.postgres) and has no snapshot.producer for app.db`;
  return undefined;
}

/**
 * Declares a domain's invariants for `outbox verify` (export it as a module's default and pass
 * `--checks <module>`). Checked at once: a `ConfigError`, one line, for a malformed set.
 */
export function defineVerifyChecks<S = undefined>(set: VerifyCheckSet<S>): VerifyCheckSet<S> {
  const problem = checkSetProblem(set);
  if (problem !== undefined) throw new ConfigError(`defineVerifyChecks: ${problem}`);
  return set;
}
