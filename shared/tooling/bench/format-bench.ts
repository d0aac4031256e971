import type { BenchResult } from './run-bench.js';
import { CPU_BASELINE, CPU_TARGET_SHARE } from './cpu-baseline.js';

type Row = [stage: string, measured: string, target: string, comparedWith: string, ratio: string, met: string];

const n = (value: number, digits = 0) => value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const perS = (value: number, unit: string) => `${n(value)} ${unit}/s`;
const met = (ok: boolean) => (ok ? 'yes' : '**no**');

/** The markdown table of targets, measurements and ratios. */
export function formatBench(r: BenchResult): string[] {
  const rows: Row[] = [];
  const { producer, relay, consumer, growth, e2e, cli, scaleOut, soak, verify } = r;
  if (producer) {
    const ratio = producer.perTransaction.perSecond / producer.rawPerTransaction.perSecond;
    rows.push(['producer, 1 order per transaction', perS(producer.perTransaction.perSecond, 'orders'), '≥ 90 % of raw', `raw better-sqlite3, same statements (order, seq, event): ${perS(producer.rawPerTransaction.perSecond, 'orders')}`, `${n(ratio * 100, 1)} %`, met(ratio >= 0.9)]);
    rows.push(['producer, batch API (1000 per tx)', perS(producer.batch.perSecond, 'orders'), '≥ 50,000 orders/s', '', '', met(producer.batch.perSecond >= 50_000)]);
  }
  if (relay) {
    const vsNaive = relay.relay.perSecond / relay.naive.perSecond;
    const vsBound = relay.relay.perSecond / relay.sqliteBound.perSecond;
    rows.push([
      'relay',
      perS(relay.relay.perSecond, 'events'),
      '≥ 150,000 events/s and ≥ 75 % of the SQLite bound',
      `SQLite bound (the relay's two statements alone, no Redis): ${perS(relay.sqliteBound.perSecond, 'events')}; raw pipelined RPUSH: ${perS(relay.rawPush.perSecond, 'events')}`,
      `${n(vsBound * 100, 1)} % of the bound`,
      met(relay.relay.perSecond >= 150_000 && vsBound >= 0.75),
    ]);
    rows.push(['relay vs naive', perS(relay.relay.perSecond, 'events'), '≥ 25× naive', `naive (row by row): ${perS(relay.naive.perSecond, 'events')}`, `${n(vsNaive, 1)}×`, met(vsNaive >= 25)]);
  }
  if (consumer) {
    const vsNaive = consumer.consumer.perSecond / consumer.naive.perSecond;
    rows.push([`consumer, Redis effects (${consumer.duplicateShare * 100} % duplicates)`, `${perS(consumer.consumer.perSecond, 'events')} applied`, '≥ 50,000 events/s', `messages taken, duplicates included: ${perS(consumer.consumerMessages.perSecond, 'messages')}`, '', met(consumer.consumer.perSecond >= 50_000)]);
    const vsRedis = consumer.database.perSecond / consumer.consumer.perSecond;
    rows.push([`consumer, database mode (${consumer.duplicateShare * 100} % duplicates)`, `${perS(consumer.database.perSecond, 'events')} applied`, '', `messages taken: ${perS(consumer.databaseMessages.perSecond, 'messages')}; Redis-effects mode above: ${perS(consumer.consumer.perSecond, 'events')} applied`, `${n(vsRedis * 100, 1)} % of Redis effects`, '']);
    const vsLimit = consumer.consumer.perSecond / consumer.scriptLimit.perSecond;
    rows.push(['consumer vs the apply script alone', `${perS(consumer.consumer.perSecond, 'events')} applied`, '≥ 90 % of the script', `the script on arguments built beforehand, all calls at once: ${perS(consumer.scriptLimit.perSecond, 'events')} applied (Redis ${n(consumer.scriptRedisUs, 1)} µs CPU per event)`, `${n(vsLimit * 100, 1)} %`, met(vsLimit >= 0.9)]);
    const vsPool = consumer.pool.perSecond / consumer.consumer.perSecond;
    rows.push(['consumer, handler module on 2 worker threads', `${perS(consumer.pool.perSecond, 'events')} applied`, '≥ 90 % of the handlers in this thread', `the same handler set in the consumer's thread: ${perS(consumer.consumer.perSecond, 'events')} applied`, `${n(vsPool * 100, 1)} %`, met(vsPool >= 0.9)]);
    rows.push(['consumer vs naive', `${perS(consumer.consumer.perSecond, 'events')} applied`, '≥ 25× naive', `naive (LPOP, SET NX, HSET): ${perS(consumer.naive.perSecond, 'events')} applied`, `${n(vsNaive, 1)}×`, met(vsNaive >= 25)]);
  }
  if (consumer && r.consumerSmall) {
    const ratio = r.consumerSmall.perSecond / consumer.consumer.perSecond;
    rows.push([`consumer, ${n(r.sizes.consumerSmallEvents)} events in a new process`, `${perS(r.consumerSmall.perSecond, 'events')} applied`, '≥ 80 % of the large run', `${n(r.sizes.consumerEvents)} events (above): ${perS(consumer.consumer.perSecond, 'events')} applied`, `${n(ratio * 100, 1)} %`, met(ratio >= 0.8)]);
  }
  // CPU per 1,000 events: µs per event is ms per 1,000 events.
  const cpuRow = (stage: string, parts: [string, number][], baseline: number) => {
    const total = parts.reduce((sum, [, ms]) => sum + ms, 0);
    const known = Number.isFinite(baseline);
    rows.push([
      `CPU per 1,000 events, ${stage}`,
      `${n(total, 1)} ms (${parts.map(([name, ms]) => `${name} ${n(ms, 1)}`).join(' + ')})`,
      known ? `≤ ${n(baseline * CPU_TARGET_SHARE, 1)} ms (−25 %)` : '',
      known ? `first measured (${CPU_BASELINE.measured}): ${n(baseline, 1)} ms` : '',
      known ? `${n((total / baseline - 1) * 100, 0)} %` : '',
      known ? met(total <= baseline * CPU_TARGET_SHARE) : '',
    ]);
  };
  if (producer) cpuRow('producer (1 order per transaction)', [['producer', producer.cpu.perTransactionUs]], CPU_BASELINE.producerMs);
  if (relay) cpuRow('relay', [['relay', relay.cpu.relayUs], ['Redis', relay.cpu.redisUs]], CPU_BASELINE.relayMs);
  if (consumer) {
    cpuRow('consumer (handlers in its thread)', [['consumer', consumer.cpu.consumerUs], ['Redis', consumer.cpu.redisUs]], CPU_BASELINE.consumerMs);
    cpuRow('consumer (handler module, 2 threads)', [['consumer', consumer.poolCpu.consumerUs], ['Redis', consumer.poolCpu.redisUs]], CPU_BASELINE.poolMs);
  }
  for (const run of e2e ?? []) {
    const negative = run.negativeLags > 0 ? `; ${n(run.negativeLags)} negative (a clock stepped back)` : '';
    rows.push([`end to end under pm2, ${n(run.rate)} ops/s`, `p50 ${n(run.p50Ms)} ms, p95 ${n(run.p95Ms)} ms, p99 ${n(run.p99Ms)} ms (max ${n(run.maxMs)})`, 'p99 ≤ 25 ms', `${n(run.events)} events; p99 commit → in Redis ${n(run.relayP99Ms)} ms, in Redis → applied ${n(run.consumerP99Ms)} ms${negative}`, '', met(run.p99Ms <= 25)]);
    rows.push([
      `start-up under pm2, ${n(run.rate)} ops/s`,
      `first event applied ${n(run.firstAppliedAfterStartMs)} ms after pm2 start; p99 ${n(run.startupP99Ms)} ms in the first ${n(run.startupWindowMs / 1000)} s`,
      'first ≤ 1,000 ms, p99 ≤ 250 ms',
      `${n(run.startupEvents)} events committed in the first ${n(run.startupWindowMs / 1000)} s of traffic, while the relay and the consumer start; pm2's daemon was running (starting it took ${n(run.pm2DaemonStartMs)} ms more)`,
      '',
      met(run.firstAppliedAfterStartMs <= 1000 && run.startupP99Ms <= 250),
    ]);
    rows.push([`start-up steps under pm2, ${n(run.rate)} ops/s`, 'ms after pm2 start', '', run.startupSteps.map(({ step, atMs }) => `${step} ${n(atMs)}`).join('; '), '', '']);
  }
  for (const run of e2e ?? []) {
    const parts = [...run.cpuPerThousand.map(({ app, ms }) => `${app} ${n(ms, 1)}`), `Redis ${n(run.redisCpuPerThousand, 1)}`];
    const total = run.cpuPerThousand.reduce((sum, { ms }) => sum + ms, run.redisCpuPerThousand);
    rows.push([`CPU per 1,000 events under pm2, ${n(run.rate)} ops/s`, `${n(total, 1)} ms`, '', `per app, ms: ${parts.join(', ')} (steady state, idle polling included)`, '', '']);
    const stalls = run.redisStalls.map(({ event, maxMs }) => `${event} ${n(maxMs)} ms`).join(', ');
    rows.push([`Redis stalls under pm2, ${n(run.rate)} ops/s`, stalls === '' ? 'none of 5 ms or more' : `longest: ${stalls}`, '', 'LATENCY LATEST over the whole run (start-up included): events Redis itself spent 5 ms or more on', '', '']);
  }
  if (growth) {
    const ratio = growth.relayEmptyTable.perSecond / growth.relayFullTable.perSecond;
    const { emptyFirst, fullFirst } = growth.costRatioByOrder;
    rows.push([`relay pass, 0 vs ${n(growth.published)} PUBLISHED rows`, `${perS(growth.relayFullTable.perSecond, 'events')} with them`, 'within 10 %', `${perS(growth.relayEmptyTable.perSecond, 'events')} without (order empty, full, full, empty)`, `${n(ratio, 2)}× the cost (empty first ${n(emptyFirst, 2)}×, full first ${n(fullFirst, 2)}×)`, met(ratio <= 1.1)]);
    rows.push([`idle relay poll, 0 vs ${n(growth.published)} rows`, `${n(growth.idlePollFullUs, 1)} µs`, 'flat', `${n(growth.idlePollEmptyUs, 1)} µs`, `${n(growth.idlePollFullUs / growth.idlePollEmptyUs, 2)}×`, met(growth.idlePollFullUs <= growth.idlePollEmptyUs * 1.1)]);
    for (const [name, rss] of [['relay', growth.relayRss], ['consumer', growth.consumerRss]] as const) {
      const flat = rss.atEndMb <= rss.at10PercentMb * 1.25;
      rows.push([`${name} RSS over ${n(growth.rssEvents)} events`, `peak ${n(rss.peakMb)} MiB`, 'flat (end ≤ 1.25× at 10 %)', `at 10 %: ${n(rss.at10PercentMb)} MiB, at the end: ${n(rss.atEndMb)} MiB`, `${n(rss.atEndMb / rss.at10PercentMb, 2)}×`, met(flat)]);
    }
    rows.push([`prune ${n(growth.prune.deleted)} rows, 1000 per tx`, perS((growth.prune.deleted * 1000) / growth.prune.ms, 'rows'), 'short transactions', `longest write lock: ${n(growth.prune.maxBatchMs, 1)} ms`, '', '']);
  }
  if (cli) {
    const slowest = Math.max(cli.helpMs, cli.reportMs);
    rows.push([`CLI start-up, median of ${cli.runs}`, `--help ${n(cli.helpMs)} ms, report ${n(cli.reportMs)} ms`, '< 200 ms', `node alone (empty script): ${n(cli.nodeMs)} ms; load average ${n(cli.loadAverage, 2)}`, '', met(slowest < 200)]);
  }
  if (scaleOut) {
    const { producer: pg, relays, consumers, loadAverage } = scaleOut;
    // Cores kept busy: CPU time per item × items per second.
    const busy = (us: number, perSecond: number, idle: number) => `${n((us * perSecond) / 1e6, 2)} cores busy, machine ${n(idle * 100)} % idle`;
    const one = pg.oneConnection.perSecond;
    const [cpu1, cpu8] = [pg.oneConnectionCpu, pg.eightConnectionsCpu];
    rows.push(['scale-out producer, PostgreSQL, 1 connection', perS(one, 'transactions'), '', `${n(pg.oneConnection.count)} transactions (placeOrder, changeQty), synchronous_commit ${pg.synchronousCommit}; CPU per transaction: node ${n(cpu1.clientUs)} µs, PostgreSQL ${n(cpu1.postgresUs)} µs, ${busy(cpu1.clientUs + cpu1.postgresUs, one, cpu1.machineIdle)}; load average ${n(loadAverage.start, 1)} → ${n(loadAverage.end, 1)}`, '1.00×', '']);
    rows.push(['scale-out producer, PostgreSQL, 8 connections', perS(pg.eightConnections.perSecond, 'transactions'), '', `1 connection, same transactions: ${perS(one, 'transactions')}; CPU per transaction: node ${n(cpu8.clientUs)} µs, PostgreSQL ${n(cpu8.postgresUs)} µs, ${busy(cpu8.clientUs + cpu8.postgresUs, pg.eightConnections.perSecond, cpu8.machineIdle)}`, `${n(pg.eightConnections.perSecond / one, 2)}×`, '']);
    const oneRelay = relays[0].published.perSecond;
    for (const run of relays) {
      const { clientUs, postgresUs, redisUs, machineIdle } = run.cpu;
      const cpu = `CPU per row: node ${n(clientUs, 1)} µs, PostgreSQL ${n(postgresUs, 1)} µs, Redis ${n(redisUs, 1)} µs, ${busy(clientUs + postgresUs + redisUs, run.published.perSecond, machineIdle)}`;
      const compared = run.relays === 1 ? `${n(run.published.count)} rows to one Redis, LLEN = rows; ${cpu}` : `1 relay: ${perS(oneRelay, 'events')}; busiest relay took ${n(run.busiestShare * 100)} %; ${cpu}`;
      rows.push([`scale-out relay, PostgreSQL, ${run.relays} relay${run.relays > 1 ? 's' : ''} at once`, `${perS(run.published.perSecond, 'events')} published`, '', compared, `${n(run.published.perSecond / oneRelay, 2)}×`, '']);
    }
    const base = consumers[0].applied.perSecond;
    for (const run of consumers) {
      const where = run.setup === 'redis' ? 'one Redis' : `the 3-master cluster (${run.masters} master${run.masters > 1 ? 's' : ''})`;
      const compared = run.setup === 'redis' ? `${n(run.applied.count)} events + 10 % re-deliveries, 1 process` : `1 partition on one Redis: ${perS(base, 'events')}; ${run.partitions} process${run.partitions > 1 ? 'es' : ''}`;
      const cpu = `CPU per event: consumers ${n(run.consumerCpuUs, 1)} µs, Redis ${n(run.redisCpuUs, 1)} µs, ${busy(run.consumerCpuUs + run.redisCpuUs, run.applied.perSecond, run.machineIdle)}`;
      rows.push([`scale-out consumer, ${run.partitions} partition${run.partitions > 1 ? 's' : ''} on ${where}`, `${perS(run.applied.perSecond, 'events')} applied`, '', `${compared}; ${cpu}`, `${n(run.applied.perSecond / base, 2)}×`, '']);
    }
    // What the machine's cores could apply if this stage had them all: the CPU one event costs, client and Redis.
    const [single] = consumers;
    const ceiling = (r.machine.cpus * 1e6) / (single.consumerCpuUs + single.redisCpuUs);
    rows.push([`scale-out consumer, CPU ceiling of ${r.machine.cpus} cores`, `${perS(ceiling, 'events')}`, '', `${r.machine.cpus} cores ÷ (consumer ${n(single.consumerCpuUs, 1)} µs + Redis ${n(single.redisCpuUs, 1)} µs CPU per event, 1 partition on one Redis)`, `measured ${n((base / ceiling) * 100)} % of it`, '']);
  }
  if (soak) {
    const setting = `${soak.rate} operations/s for ${n(soak.durationMs / 1000)} s, window ${n(soak.windowMs / 1000)} s, horizon ${n(soak.horizonMs / 1000)} s`;
    for (const g of soak.growth) {
      rows.push([`soak: ${g.series}`, `last third mean ${n(g.lastThird)}`, 'flat (≤ 5 % over the second third)', `second third mean ${n(g.secondThird)}; ${setting}`, `${n(g.ratio, 3)}×`, met(g.bounded)]);
    }
    const [first, last] = [soak.samples[0], soak.samples[soak.samples.length - 1]];
    const perAggregate = (last.perAggregateBytes - first.perAggregateBytes) / Math.max(1, last.aggregates - first.aggregates);
    rows.push(['soak: store rows kept per aggregate', `${n(perAggregate)} bytes`, '', `outbox_aggregates and outbox_pruned, ${n(last.aggregates)} aggregates at the end`, '', '']);
    const failed = soak.verifyFailed.length === 0 ? 'VERIFY OK' : `failed: ${soak.verifyFailed.join(', ')}`;
    rows.push(['soak: verify at the end', failed, 'VERIFY OK', `${n(soak.events)} events applied`, '', met(soak.verifyFailed.length === 0)]);
  }
  if (verify) {
    const base = verify.runs[0];
    // The swept run holds as many events in app.db, half of them past the window with their records swept.
    const events = (run: (typeof verify.runs)[number]) =>
      `${n(run.events)} events${run.sweptEvents > 0 ? ` (${n(run.sweptEvents)} swept)` : ''}`;
    for (const run of verify.runs) {
      const outcome = run.ok ? 'VERIFY OK' : `exit ${run.exitCode}: ${run.failed.join('; ') || 'no VERIFY OK'}`;
      const history = `${n(run.orders)} orders, Redis used_memory ${n(run.redisUsedMb)} MiB; `
        + `bulk-made in ${n(run.seedMs / 1000, 1)} s`;
      const measured = `${outcome} in ${n(run.wallMs / 1000, 1)} s`;
      rows.push([`verify over ${events(run)}`, measured, 'VERIFY OK', history, '', met(run.ok)]);
    }
    for (const run of verify.runs.slice(1)) {
      const ratio = run.peakRssMb / base.peakRssMb;
      const compared = `over ${n(base.events)} events: ${n(base.peakRssMb)} MiB (VmHWM of the verify process)`;
      const target = `≤ over ${n(base.events)} events`;
      const measured = `${n(run.peakRssMb)} MiB`;
      const stage = `verify peak RSS, ${events(run)}`;
      rows.push([stage, measured, target, compared, `${n(ratio, 2)}×`, met(ratio <= 1)]);
    }
    for (const run of verify.runs) {
      // SLOWLOG keeps calls of 1 ms or more: none kept means every call took less.
      const slowest = run.slowCalls === 0
        ? `< ${n(run.slowlogThresholdUs / 1000)} ms (none logged)`
        : `${n(run.slowestCallUs / 1000, 2)} ms (${run.slowestCall})`;
      const latency = run.latencyPeakMs === 0
        ? 'no LATENCY event of 10 ms or more'
        : `LATENCY LATEST peak ${n(run.latencyPeakMs)} ms`;
      const compared = `${n(run.redisCalls)} Redis calls, ${n(run.slowCalls)} of 1 ms or more, `
        + `${n(run.callsOver10Ms)} over 10 ms (SLOWLOG); ${latency}; heaviest on average: `
        + `${run.heaviestCommand} ${n(run.heaviestMeanUs)} µs per call; load average ${n(run.loadAverage, 1)}`;
      rows.push([`verify's slowest Redis call, ${events(run)}`, slowest, '≤ 10 ms', compared, '',
        met(run.slowestCallUs <= 10_000)]);
    }
  }
  const header: Row = ['stage', 'measured', 'target', 'compared with (same run)', 'ratio', 'met'];
  return [
    `outbox bench, ${r.at}, ${r.machine.cpus} × ${r.machine.model}, node ${r.machine.node}`,
    '',
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...rows.map((row) => `| ${row.join(' | ')} |`),
  ];
}
