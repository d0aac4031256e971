import type { ChaosResult } from './run-chaos.js';

function seconds(ms: number | null): string {
  return ms === null ? 'did not drain' : `${(ms / 1000).toFixed(1)} s`;
}

/** The table `outbox chaos` prints. */
export function formatChaos(r: ChaosResult): string[] {
  const rows: [string, string | number, string][] = [
    ['orders', r.orders, ''],
    ['outbox rows', r.outboxRows, ''],
    ['enqueued', r.enqueued, `>= ${r.outboxRows}`],
    ['processed_unique', r.processedUnique, `= ${r.outboxRows}`],
    ['duplicates absorbed', r.duplicatesAbsorbed, ''],
    ['lost', r.lost, '0'],
    ['applied twice', r.appliedTwice, '0'],
    ['applied out of order', r.outOfOrder, '0'],
    ['inventory mismatches', r.inventoryMismatches, '0'],
    ['parked', r.parked, '0'],
    ['dead-lettered', r.deadLettered, ''],
    ['max pending age', seconds(r.maxPendingAgeMs), ''],
    ['time to drain', seconds(r.drainMs), ''],
  ];
  const faults = Object.entries(r.faults).sort(([a], [b]) => a.localeCompare(b));
  return [
    `outbox chaos: seed ${r.seed}, ${r.durationMs / 1000} s of traffic at ${r.rate} operations/s`,
    '',
    'faults injected',
    ...(faults.length === 0 ? ['  none'] : faults.map(([kind, n]) => `  ${kind.padEnd(30)} ${String(n).padStart(5)}`)),
    '',
    `${'figure'.padEnd(24)} ${'value'.padStart(12)}  must be`,
    ...rows.map(([name, value, must]) => `${name.padEnd(24)} ${String(value).padStart(12)}  ${must}`),
    '',
    r.ok
      ? 'CHAOS OK: nothing lost, nothing applied twice, nothing applied out of order'
      : `CHAOS FAILED: ${r.ledger.filter((c) => c.status === 'FAIL').map((c) => `${c.name} ${c.actual}`).join('; ') || 'applied twice'}`,
  ];
}
