import type { SoakFigures, SoakSample } from './soak-bench.js';

const PANEL_W = 300;
const PANEL_H = 150;
const PAD = 36;
const COLUMNS = 3;

/** A small chart per series of the soak's samples, as one SVG: each should go flat once the window, horizon and prune age have passed. */
export function soakChart(figures: SoakFigures): string {
  const { samples } = figures;
  const mb = (bytes: number) => bytes / 1024 / 1024;
  const series: [string, string, (s: SoakSample) => number][] = [
    ['Redis used_memory', 'MiB', (s) => mb(s.redisBytes)],
    ['outbox rows', 'rows', (s) => s.outboxRows],
    ['outbox table + indexes', 'MiB', (s) => mb(s.outboxBytes)],
    ['app.db WAL', 'MiB', (s) => mb(s.walBytes)],
    ['per-aggregate store rows', 'MiB', (s) => mb(s.perAggregateBytes)],
    ['log files', 'KiB', (s) => s.logBytes / 1024],
    ...Object.keys(samples[0]?.rss ?? {}).map((app): [string, string, (s: SoakSample) => number] => [`${app} RSS`, 'MiB', (s) => mb(s.rss[app] ?? 0)]),
  ];
  const rows = Math.ceil(series.length / COLUMNS);
  const width = COLUMNS * (PANEL_W + PAD) + PAD;
  const height = rows * (PANEL_H + 2 * PAD) + 40;
  const lastMs = samples[samples.length - 1]?.atMs ?? 1;
  const settledMs = figures.windowMs + figures.horizonMs;
  const panels = series.map(([name, unit, value], index) => {
    const x0 = PAD + (index % COLUMNS) * (PANEL_W + PAD);
    const y0 = 40 + Math.floor(index / COLUMNS) * (PANEL_H + 2 * PAD) + PAD;
    const top = Math.max(...samples.map(value)) * 1.1 || 1;
    const x = (ms: number) => x0 + (ms / lastMs) * PANEL_W;
    const y = (v: number) => y0 + PANEL_H - (v / top) * PANEL_H;
    const points = samples.map((s) => `${x(s.atMs).toFixed(1)},${y(value(s)).toFixed(1)}`).join(' ');
    return [
      `<rect x="${x0}" y="${y0}" width="${PANEL_W}" height="${PANEL_H}" fill="none" stroke="#ccc"/>`,
      `<line x1="${x(settledMs)}" y1="${y0}" x2="${x(settledMs)}" y2="${y0 + PANEL_H}" stroke="#999" stroke-dasharray="4 3"/>`,
      `<polyline points="${points}" fill="none" stroke="#1f77b4" stroke-width="2"/>`,
      `<text x="${x0}" y="${y0 - 8}" font-size="13">${name} (${unit}, 0–${format(top)})</text>`,
      `<text x="${x0 + PANEL_W}" y="${y0 + PANEL_H + 16}" font-size="11" text-anchor="end">${Math.round(lastMs / 1000)} s</text>`,
    ].join('\n');
  });
  const title =
    `soak: ${figures.rate} operations/s, window ${figures.windowMs / 1000} s, horizon ${figures.horizonMs / 1000} s, ` +
    `prune after ${figures.pruneAfterMs / 1000} s (dashed: window + horizon)`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${PAD}" y="24" font-size="15">${title}</text>`,
    ...panels,
    '</svg>',
    '',
  ].join('\n');
}

function format(value: number): string {
  return value >= 100 ? String(Math.round(value)) : value.toFixed(1);
}
