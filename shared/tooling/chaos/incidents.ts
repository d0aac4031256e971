import { existsSync, readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import type { Db } from '../../outbox/store/open-database.js';
import { keys } from '../../outbox/redis/keys.js';
import { sleep } from '../../outbox/sleep.js';

/** The faults whose duplicates `outbox chaos` measures one by one. */
export type IncidentKind = 'pause relay' | 'pause consumer' | 'sqlite lock';

/** How long after a measured fault ends its duplicates are still counted (ms): the relay catching up. */
export const INCIDENT_SETTLE_MS = 2000;

/** One measured fault. */
export interface Incident {
  kind: IncidentKind;
  /** When the fault began, ms after traffic started. */
  atMs: number;
  /**
   * Messages the relay pushed that did not turn a row PUBLISHED, from just before the fault to
   * `INCIDENT_SETTLE_MS` after it: Δ`outbox:enqueued` − Δ(PUBLISHED rows).
   */
  duplicates: number;
  /** Other faults that could add duplicates meanwhile: armed crash points that fired in the window. */
  overlaps: string[];
}

/** Per kind: how many incidents, their largest and their summed duplicates. */
export type IncidentSummary = Partial<Record<IncidentKind, { incidents: number; max: number; total: number }>>;

interface Snapshot {
  enqueued: number;
  published: number;
  crashes: number;
}

function crashLines(crashLog: string): string[] {
  return existsSync(crashLog) ? readFileSync(crashLog, 'utf8').split('\n').filter(Boolean) : [];
}

/**
 * The two counters at an instant the relay has nothing pushed but not yet marked: a batch in that
 * state would read as duplicates now and as negative duplicates later. PUBLISHED is read before
 * enqueued, so a reading never counts fewer unmarked pushes than there are (a row marked is a row
 * pushed), and of 25 readings 7 ms apart (out of step with the producer's 10 ms ticks) the
 * lowest is taken: the relay spends most of its time between batches.
 */
async function snapshot(db: Db, client: Redis, crashLog: string): Promise<Snapshot> {
  const countPublished = db.prepare("SELECT COUNT(*) FROM outbox WHERE status = 'PUBLISHED'").pluck();
  let best: Snapshot | undefined;
  for (let reading = 0; reading < 25; reading += 1) {
    if (reading > 0) await sleep(7);
    const published = countPublished.get() as number;
    const enqueued = Number((await client.get(keys.enqueued)) ?? 0);
    if (!best || enqueued - published < best.enqueued - best.published) best = { enqueued, published, crashes: 0 };
  }
  return { ...best!, crashes: crashLines(crashLog).length };
}

/**
 * Starts measuring a fault that is about to begin; the returned function, called once the fault
 * ended and the settle time passed, gives the incident. Faults run one after another, so the only
 * other source of duplicates in the window is an armed crash point firing: named in `overlaps`.
 */
export async function measureIncident(kind: IncidentKind, atMs: number, db: Db, client: Redis, crashLog: string): Promise<() => Promise<Incident>> {
  const before = await snapshot(db, client, crashLog);
  return async () => {
    const after = await snapshot(db, client, crashLog);
    return {
      kind,
      atMs,
      duplicates: after.enqueued - before.enqueued - (after.published - before.published),
      overlaps: crashLines(crashLog)
        .slice(before.crashes)
        .map((point) => `crash ${point}`),
    };
  };
}

export function summarizeIncidents(incidents: Incident[]): IncidentSummary {
  const summary: IncidentSummary = {};
  for (const { kind, duplicates } of incidents) {
    const s = (summary[kind] ??= { incidents: 0, max: 0, total: 0 });
    s.incidents += 1;
    s.max = Math.max(s.max, duplicates);
    s.total += duplicates;
  }
  return summary;
}
