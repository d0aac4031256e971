/** One second of the pipeline: counts now, and the counters the rates come from. Null: could not be read. */
export interface Sample {
  /** ms since epoch. */
  t: number;
  pending: number | null;
  queued: number | null;
  inFlight: number | null;
  /** Counters: events committed (highest outbox id), pushed by the relay, applied by the consumers. */
  committed: number | null;
  enqueued: number | null;
  applied: number | null;
  /** Age of the oldest PENDING row (the relay's lag) and of the oldest queued message (the consumers'), ms. */
  relayLagMs: number | null;
  consumerLagMs: number | null;
}

export interface Rates {
  /** Per second over the last `RATE_WINDOW_MS`: events committed, relayed (pushed), applied. */
  committed: number | null;
  relayed: number | null;
  applied: number | null;
}

/** How much history the lag chart gets: ten minutes of one sample a second. */
export const HISTORY_MS = 10 * 60_000;
const RATE_WINDOW_MS = 5_000;

/** The samples of the last `HISTORY_MS`, oldest first, and the rates they give. */
export class History {
  private readonly samples: Sample[] = [];

  add(sample: Sample): void {
    this.samples.push(sample);
    while (this.samples.length > 0 && this.samples[0].t < sample.t - HISTORY_MS) this.samples.shift();
  }

  /** The samples taken after `t` (all of them for 0). */
  since(t: number): Sample[] {
    const from = this.samples.findIndex((s) => s.t > t);
    return from < 0 ? [] : this.samples.slice(from);
  }

  rates(): Rates {
    const last = this.samples.at(-1);
    const first = last && (this.samples.find((s) => s.t >= last.t - RATE_WINDOW_MS) ?? last);
    const rate = (field: 'committed' | 'enqueued' | 'applied') => {
      if (!last || !first || last === first) return null;
      const [a, b] = [first[field], last[field]];
      // A counter that went back (Redis lost its state, app.db was replaced) gives no rate.
      if (a === null || b === null || b < a) return null;
      return ((b - a) * 1000) / (last.t - first.t);
    };
    return { committed: rate('committed'), relayed: rate('enqueued'), applied: rate('applied') };
  }
}
