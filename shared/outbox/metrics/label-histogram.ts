import type { Metric } from 'prom-client';

/** One labelled series: counts per bucket (not cumulative; the last is +Inf), their sum and count. */
interface Series {
  counts: number[];
  sum: number;
  count: number;
}

/**
 * A Prometheus histogram with one label, for values observed per event: `observer(label)` returns
 * a function that only finds the bucket and adds (tens of ns), where prom-client's `observe` hashes
 * the labels on every call (about 0.5 µs each, measured here). prom-client's registry formats it
 * like its own histograms (`_bucket{le}`, `_sum`, `_count`, the registry's default labels).
 */
export function labelHistogram(name: string, help: string, labelName: string, buckets: readonly number[]) {
  const series = new Map<string, Series>();
  const bounds = [...buckets].sort((a, b) => a - b);
  const seriesOf = (label: string): Series => {
    let s = series.get(label);
    if (!s) series.set(label, (s = { counts: new Array<number>(bounds.length + 1).fill(0), sum: 0, count: 0 }));
    return s;
  };
  const metric = {
    name,
    help,
    type: 'histogram' as const,
    /** The function that records one value of series `label`. */
    observer(label: string): (value: number) => void {
      const s = seriesOf(label);
      return (value) => {
        let i = 0;
        while (i < bounds.length && value > bounds[i]) i += 1;
        s.counts[i] += 1;
        s.sum += value;
        s.count += 1;
      };
    },
    /** What prom-client's registry reads at scrape. */
    get() {
      const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
      for (const [label, s] of series) {
        let cumulative = 0;
        bounds.forEach((bound, i) => {
          cumulative += s.counts[i];
          values.push({ metricName: `${name}_bucket`, labels: { le: bound, [labelName]: label }, value: cumulative });
        });
        values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', [labelName]: label }, value: cumulative + s.counts[bounds.length] });
        values.push({ metricName: `${name}_sum`, labels: { [labelName]: label }, value: s.sum });
        values.push({ metricName: `${name}_count`, labels: { [labelName]: label }, value: s.count });
      }
      return { name, help, type: 'histogram', values, aggregator: 'sum' };
    },
    reset(): void {
      for (const s of series.values()) {
        s.counts.fill(0);
        s.sum = 0;
        s.count = 0;
      }
    },
  };
  return metric as typeof metric & Metric;
}
