import { EXAMPLES } from '../../outbox/verify/verify-checks.js';

/** An aggregate whose pruned seqs `fromSeq`-`throughSeq` Redis no longer counts as applied. */
export interface PrunedBehind {
  aggregate: string;
  fromSeq: number;
  throughSeq: number;
}

/** An aggregate whose applied seq Redis holds below `throughSeq`, the last seq its events' processed entries show applied in order. */
export interface AppliedSeqBehind {
  aggregate: string;
  appliedSeq: number;
  throughSeq: number;
}

/** How many were found, and the first few. */
export class Tally<T> {
  count = 0;
  samples: T[] = [];

  constructor(private readonly limit = EXAMPLES) {}

  add(item: T): void {
    this.count += 1;
    if (this.samples.length < this.limit) this.samples.push(item);
  }
}

/**
 * An aggregate whose applied seq is below its pruned seq P, seq P + 1 not shown applied (see
 * `prunedSeqsApplied`): judged once the processed hash was scanned for its pruned events' entries.
 */
export interface PrunedCandidate {
  key: string;
  throughSeq: number;
  events: number;
  /** Its applied seq (0: none). */
  appliedSeq: number;
  /** The last seq its events applied by the MULTI's instant reach in order, from max(applied seq, P). */
  chainThrough: number;
}

/** What the look found, as counts and a few examples, and in full only what is wrong (what --repair works on). */
export interface Findings {
  /** The snapshot's events (up to the horizon). */
  events: number;
  /** Of them, applied per their seq guard, their records swept by the dedupe window. */
  sweptInSnapshot: number;
  /** Not applied by the MULTI's instant, or PENDING (see `inFlightOf` in the ledger): what a settle waits for. */
  inFlight: string[];
  /** PUBLISHED, not applied, in no list read, not dead-lettered, not at a seq another event took. */
  unaccounted: { event_id: string; aggregate_id: string }[];
  /** Events at a seq Redis applied as another event (see `takenSeqs`). */
  taken: Tally<{ event_id: string; aggregate_id: string; seq: number }>;
  /** Aggregates whose applied seq is past the store's last seq. */
  overtaken: Tally<{ aggregate: string; applied: number; last: number }>;
  /** The partitions where a taken seq or an aggregate past the store was found. */
  behindPartitions: Set<number>;
  appliedTwice: Tally<string>;
  disordered: Tally<string>;
  corrupt: Tally<string>;
  /** Aggregates whose applied seq != last seq; the samples may hold some of `seqBehind` (left out when shown). */
  seqMismatch: Tally<string>;
  seqBehind: AppliedSeqBehind[];
  prunedCandidates: PrunedCandidate[];
  /** Guards found per partition, of the aggregates verify knows (the others are looked for only when the count says there are). */
  found: number[];
  /** Each partition's guard count at its last chunk's MULTI (-1: not read). */
  guardCounts: number[];
}

export function newFindings(partitions: number): Findings {
  return {
    events: 0,
    sweptInSnapshot: 0,
    inFlight: [],
    unaccounted: [],
    taken: new Tally(),
    overtaken: new Tally(),
    behindPartitions: new Set(),
    appliedTwice: new Tally(),
    disordered: new Tally(),
    corrupt: new Tally(),
    seqMismatch: new Tally(2 * EXAMPLES),
    seqBehind: [],
    prunedCandidates: [],
    found: new Array<number>(partitions).fill(0),
    guardCounts: new Array<number>(partitions).fill(-1),
  };
}
