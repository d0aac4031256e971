import { INCIDENT_SETTLE_MS } from './incidents.js';
import type { ChaosResult } from './run-chaos.js';
import type { ScaleOutChaosResult } from './scale-out-chaos.js';

function seconds(ms: number | null): string {
  return ms === null ? 'did not drain' : `${(ms / 1000).toFixed(1)} s`;
}

type Row = [name: string, value: string | number, mustBe: string];

/** `row` when `shown`: figures of a fault kind appear only in runs that have it. */
function only(shown: boolean, row: Row): Row[] {
  return shown ? [row] : [];
}

/** The table `outbox chaos` prints. */
export function formatChaos(r: ChaosResult): string[] {
  const wipes = r.faults['redis wiped'] ?? 0;
  const rows: Row[] = [
    ['orders', r.orders, ''],
    ['outbox rows', r.outboxRows, ''],
    ...only(r.faults.prune !== undefined, ['pruned', r.pruned, '']),
    ['enqueued', r.enqueued, `>= ${r.outboxRows + r.pruned}`],
    ['processed_unique', r.processedUnique, `= ${r.outboxRows + r.pruned}`],
    ['duplicates absorbed', r.duplicatesAbsorbed, ''],
    ['lost', r.lost, '0'],
    ...only(wipes > 0, ['unrecoverable', r.unrecoverable, '0']),
    ['applied twice', r.appliedTwice, '0'],
    ['applied out of order', r.outOfOrder, '0'],
    ['inventory mismatches', r.inventoryMismatches, '0'],
    ['parked', r.parked, '0'],
    ['dead-lettered', r.deadLettered, '0'],
    ['max pending age', seconds(r.maxPendingAgeMs), ''],
    ['time to drain', seconds(r.drainMs), ''],
  ];
  const faults = Object.entries(r.faults).sort(([a], [b]) => a.localeCompare(b));
  const lifetimes =
    wipes > 0
      ? [
          '',
          `Redis was wiped ${wipes} time(s): enqueued, duplicates absorbed and applied twice are summed over its`,
          `${wipes + 1} lives (each read just before its wipe); processed_unique is the last life's, rebuilt from SQLite.`,
          'unrecoverable: pruned events whose effects a later wipe lost for good.',
        ]
      : [];
  const measured = Object.entries(r.duplicatesPerIncident);
  const overlapped = r.incidents.filter((i) => i.overlaps.length > 0);
  const incidents =
    measured.length > 0
      ? [
          '',
          `duplicates per incident (enqueued - rows newly PUBLISHED, from just before the fault to ${INCIDENT_SETTLE_MS / 1000} s after it)`,
          ...measured.map(([kind, s]) => `  ${kind.padEnd(16)} incidents ${String(s.incidents).padStart(3)}   max ${String(s.max).padStart(5)}   total ${String(s.total).padStart(6)}`),
          ...overlapped.map((i) => `  ${i.kind} at ${(i.atMs / 1000).toFixed(1)} s (${i.duplicates} duplicates) overlapped: ${i.overlaps.join(', ')}`),
        ]
      : [];
  return [
    `outbox chaos: seed ${r.seed}, ${r.durationMs / 1000} s of traffic at ${r.rate} operations/s`,
    '',
    'faults injected',
    ...(faults.length === 0 ? ['  none'] : faults.map(([kind, n]) => `  ${kind.padEnd(30)} ${String(n).padStart(5)}`)),
    ...incidents,
    '',
    `${'figure'.padEnd(24)} ${'value'.padStart(12)}  must be`,
    ...rows.map(([name, value, must]) => `${name.padEnd(24)} ${String(value).padStart(12)}  ${must}`),
    ...lifetimes,
    '',
    r.ok
      ? 'CHAOS OK: nothing lost, nothing applied twice, nothing applied out of order'
      : `CHAOS FAILED: ${r.ledger.filter((c) => c.status === 'FAIL').map((c) => `${c.name} ${c.actual}`).join('; ') || 'applied twice'}`,
  ];
}

/** The table `outbox chaos --database …` prints (the scale-out run). */
export function formatScaleOutChaos(r: ScaleOutChaosResult): string[] {
  const l = r.ledger;
  const rows: Row[] = [
    ['orders', r.orders, ''],
    ['outbox rows', l.events, '> 0'],
    ['aggregates', l.aggregates, ''],
    ['enqueued', r.enqueued, ''],
    ['duplicates absorbed', r.duplicatesAbsorbed, ''],
    ['lost', l.lost.length, '0'],
    ['applied twice', l.appliedTwice.length, '0'],
    ['applied out of order', l.outOfOrder.length, '0'],
    ['applied, not in the store', l.extra, '0'],
    ['parked', l.parked, '0'],
    ['dead-lettered', l.deadLettered, '0'],
    ['still queued', l.queued, '0'],
    ['time to drain', seconds(r.drainMs), ''],
  ];
  const faults = Object.entries(r.faults).sort(([a], [b]) => a.localeCompare(b));
  const named = [...l.lost.map((e) => `lost ${e}`), ...l.appliedTwice.map((e) => `applied twice ${e}`), ...l.outOfOrder.map((e) => `out of order ${e}`)].slice(0, 10);
  return [
    `outbox chaos on PostgreSQL + a 3-master Redis Cluster: seed ${r.seed}, ${r.durationMs / 1000} s of traffic at ${r.rate} operations/s,`,
    `${r.relays} relays, ${r.consumers} consumers, ${r.partitions} partitions`,
    '',
    'faults injected',
    ...(faults.length === 0 ? ['  none'] : faults.map(([kind, n]) => `  ${kind.padEnd(30)} ${String(n).padStart(5)}`)),
    '',
    `${'figure'.padEnd(26)} ${'value'.padStart(10)}  must be`,
    ...rows.map(([name, value, must]) => `${name.padEnd(26)} ${String(value).padStart(10)}  ${must}`),
    ...(named.length > 0 ? ['', ...named.map((line) => `  ${line}`)] : []),
    '',
    r.ok
      ? 'CHAOS OK: nothing lost, nothing applied twice, nothing applied out of order'
      : `CHAOS FAILED: ${r.drainMs === null ? 'the ledger did not hold within the drain timeout' : 'no event was written'}`,
  ];
}
