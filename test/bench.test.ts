import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pg from 'pg';
import { runCli } from './helpers/cli.js';
import { PG_SERVER_URL } from './helpers/postgres.js';
import { tempDir } from './helpers/stores.js';

// outbox bench brings its own redis-server, data, pm2 home, Redis Cluster and PostgreSQL database
// (outbox_bench_*, on the test server). A smoke run: it checks that every stage runs and reports,
// never how fast (benchmarks are not timed tests).
const env = { dir: '/nonexistent', redisUrl: 'redis://127.0.0.1:1' };

describe('outbox bench', () => {
  it('--quick runs every stage and writes the figures as JSON and a markdown table', async () => {
    const out = tempDir();
    const result = await runCli(['bench', '--quick', '--out', out, '--postgres', PG_SERVER_URL], env);
    assert.equal(result.code, 0, result.stderr);
    for (const stage of [
      'producer, 1 order per transaction',
      'producer, batch API',
      'relay',
      'relay vs naive',
      'consumer, Redis effects (10 % duplicates)',
      'consumer, database mode (10 % duplicates)',
      'consumer vs naive',
      'consumer vs the apply script alone',
      'consumer, handler module on 2 worker threads',
      'consumer, 1,000 events in a new process',
      'CPU per 1,000 events, producer (1 order per transaction)',
      'CPU per 1,000 events, relay',
      'CPU per 1,000 events, consumer (handlers in its thread)',
      'CPU per 1,000 events, consumer (handler module, 2 threads)',
      'CPU per 1,000 events under pm2',
      'Redis stalls under pm2',
      'end to end under pm2',
      'relay pass, 0 vs',
      'relay RSS over',
      'consumer RSS over',
      'prune',
      'CLI start-up, median of',
      'scale-out producer, PostgreSQL, 1 connection',
      'scale-out producer, PostgreSQL, 8 connections',
      'scale-out relay, PostgreSQL, 1 relay at once',
      'scale-out relay, PostgreSQL, 2 relays at once',
      'scale-out relay, PostgreSQL, 4 relays at once',
      'scale-out consumer, 1 partition on one Redis',
      'scale-out consumer, 1 partition on the 3-master cluster (1 master)',
      'scale-out consumer, 2 partitions on the 3-master cluster (2 masters)',
      'scale-out consumer, 4 partitions on the 3-master cluster (3 masters)',
      'scale-out consumer, CPU ceiling of',
    ]) {
      assert.match(result.stdout, new RegExp(`^\\| ${stage.replace(/[()]/g, '\\$&')}`, 'm'), stage);
    }
    const [file] = readdirSync(out);
    const figures = JSON.parse(readFileSync(join(out, file), 'utf8'));
    for (const value of [
      figures.producer.perTransaction.perSecond,
      figures.producer.rawPerTransaction.perSecond,
      figures.producer.batch.perSecond,
      figures.relay.relay.perSecond,
      figures.relay.rawPush.perSecond,
      figures.relay.naive.perSecond,
      figures.consumer.consumer.perSecond,
      figures.consumer.naive.perSecond,
      figures.growth.relayFullTable.perSecond,
      figures.growth.relayRss.peakMb,
      figures.growth.consumerRss.peakMb,
      ...figures.e2e.map((run: { p99Ms: number }) => run.p99Ms),
      figures.consumer.consumerMessages.perSecond,
      figures.consumer.database.perSecond,
      figures.consumer.databaseMessages.perSecond,
      figures.relay.sqliteBound.perSecond,
      figures.relay.cpu.relayUs,
      figures.relay.cpu.redisUs,
      figures.producer.cpu.perTransactionUs,
      figures.consumer.scriptLimit.perSecond,
      figures.consumer.scriptRedisUs,
      figures.consumer.pool.perSecond,
      figures.consumer.cpu.consumerUs,
      figures.consumer.cpu.redisUs,
      figures.consumer.poolCpu.consumerUs,
      figures.consumerSmall.perSecond,
      ...figures.e2e.map((run: { redisCpuPerThousand: number }) => run.redisCpuPerThousand),
      ...figures.e2e.flatMap((run: { cpuPerThousand: { ms: number }[] }) => run.cpuPerThousand.map((app) => app.ms)),
      ...figures.e2e.flatMap((run: { firstAppliedAfterStartMs: number; pm2DaemonStartMs: number }) => [run.firstAppliedAfterStartMs, run.pm2DaemonStartMs]),
      figures.cli.nodeMs,
      figures.cli.helpMs,
      figures.cli.reportMs,
      figures.scaleOut.producer.oneConnection.perSecond,
      figures.scaleOut.producer.eightConnections.perSecond,
      ...figures.scaleOut.relays.map((run: { published: { perSecond: number } }) => run.published.perSecond),
      ...figures.scaleOut.consumers.map((run: { applied: { perSecond: number } }) => run.applied.perSecond),
    ]) {
      assert.ok(Number.isFinite(value) && value > 0, `${value}`);
    }
    assert.equal(figures.growth.prune.deleted, figures.sizes.growthPublished);
    // One end-to-end run per rate, each split into relay and consumer parts taken where they
    // happen (Redis's clock at the push and at the apply): no part comes out negative.
    assert.deepEqual(figures.e2e.map((run: { rate: number }) => run.rate), figures.sizes.e2eRates);
    for (const run of figures.e2e) assert.equal(run.negativeLags, 0);
    // Redis's own stalls: what LATENCY LATEST names, each with its longest.
    // The start-up's steps: pm2's CLI, each app started and ready, the first commit, message and
    // apply, each once and in the order they happen (an event is committed before it is in Redis,
    // in Redis before it is applied, and the last is the first event applied).
    for (const run of figures.e2e) {
      const steps: string[] = run.startupSteps.map(({ step }: { step: string }) => step);
      const expected = ['pm2 start returned', 'first commit', 'first message in Redis', 'first event applied'];
      for (const app of ['outbox-relay', 'outbox-consumer', 'outbox-producer']) expected.push(`${app} started by pm2`, `${app} ready`);
      assert.deepEqual([...steps].sort(), [...expected].sort(), JSON.stringify(run.startupSteps));
      const at = (step: string) => run.startupSteps.find((s: { step: string }) => s.step === step).atMs;
      assert.ok(at('first commit') <= at('first message in Redis') && at('first message in Redis') <= at('first event applied'), JSON.stringify(run.startupSteps));
      assert.equal(at('first event applied'), run.firstAppliedAfterStartMs);
      for (const app of ['outbox-relay', 'outbox-consumer', 'outbox-producer']) assert.ok(at(`${app} started by pm2`) <= at(`${app} ready`), JSON.stringify(run.startupSteps));
      assert.match(result.stdout, new RegExp(`^\\| start-up steps under pm2, ${run.rate.toLocaleString('en-US')} ops/s \\|.*pm2 start returned \\d`, 'm'));
    }
    for (const run of figures.e2e) for (const stall of run.redisStalls) assert.ok(typeof stall.event === 'string' && stall.maxMs >= 5, JSON.stringify(stall));
    // CPU per 1,000 events under pm2: the producer, the relay and the consumer each measured.
    for (const run of figures.e2e) {
      assert.deepEqual(['outbox-consumer', 'outbox-producer', 'outbox-relay'].filter((app) => run.cpuPerThousand.some((a: { app: string }) => a.app === app)), ['outbox-consumer', 'outbox-producer', 'outbox-relay']);
    }
    assert.equal((result.stdout.match(/^\| end to end under pm2, /gm) ?? []).length, figures.sizes.e2eRates.length);
    // Applied events/s leave the re-deliveries out: fewer than the messages taken.
    assert.ok(figures.consumer.consumer.perSecond < figures.consumer.consumerMessages.perSecond);
    assert.ok(figures.consumer.database.perSecond < figures.consumer.databaseMessages.perSecond);
    // Scale-out: the same work for each count (the relays' runs checked every row PUBLISHED and as
    // many messages queued), and the stage's own database is gone.
    const { producer, relays, consumers, database } = figures.scaleOut;
    assert.equal(producer.oneConnection.count, producer.eightConnections.count);
    assert.deepEqual(relays.map((run: { relays: number }) => run.relays), [1, 2, 4]);
    for (const run of relays) {
      assert.equal(run.published.count, figures.sizes.scaleOutRelayRows);
      assert.ok(run.busiestShare >= 1 / run.relays && run.busiestShare <= 1, `${run.relays} relays: busiest share ${run.busiestShare}`);
      assert.ok(run.cpu.clientUs > 0 && run.cpu.postgresUs >= 0 && run.cpu.redisUs > 0, JSON.stringify(run.cpu));
    }
    assert.deepEqual(consumers.map((run: { setup: string; partitions: number }) => `${run.setup} ${run.partitions}`), ['redis 1', 'cluster 1', 'cluster 2', 'cluster 4']);
    for (const run of consumers) {
      assert.equal(run.applied.count, figures.sizes.scaleOutConsumerEvents);
      assert.ok(run.consumerCpuUs > 0 && run.redisCpuUs > 0, `CPU per event: ${run.consumerCpuUs}, ${run.redisCpuUs}`);
      assert.ok(run.machineIdle >= 0 && run.machineIdle <= 1, `machine idle ${run.machineIdle}`);
    }
    assert.match(database, /^outbox_bench_/);
    const server = new pg.Pool({ connectionString: PG_SERVER_URL, max: 1 });
    try {
      assert.equal((await server.query('SELECT COUNT(*)::int AS n FROM pg_database WHERE datname = $1', [database])).rows[0].n, 0);
    } finally {
      await server.end();
    }
  });

  it('--quick --only verify runs verify over two bulk-made histories and reports RSS and Redis calls', async () => {
    const out = tempDir();
    const result = await runCli(['bench', '--quick', '--only', 'verify', '--out', out], env);
    assert.equal(result.code, 0, result.stderr);
    const [small, large] = [2_000, 20_000].map((events) => events.toLocaleString('en-US'));
    for (const row of [
      `verify over ${small} events \\| VERIFY OK`,
      `verify over ${large} events \\| VERIFY OK`,
      `verify peak RSS, ${large} events`,
      `verify's slowest Redis call, ${small} events`,
      `verify's slowest Redis call, ${large} events`,
      `verify over ${large} events \\(10,000 swept\\) \\| VERIFY OK`,
      `verify peak RSS, ${large} events \\(10,000 swept\\)`,
    ]) {
      assert.match(result.stdout, new RegExp(`^\\| ${row}`, 'm'), row);
    }
    const [file] = readdirSync(out);
    const { verify, sizes } = JSON.parse(readFileSync(join(out, file), 'utf8'));
    // The bulk-made stores and Redis agree: verify passes; the figures are there, not judged (no timing).
    const runs = verify.runs.map((run: { events: number; sweptEvents: number }) => [run.events, run.sweptEvents]);
    assert.deepEqual(runs, [[2_000, 0], [20_000, 0], [20_000, 10_000]]);
    assert.deepEqual(sizes.verifyEvents, [2_000, 20_000]);
    for (const run of verify.runs) {
      assert.equal(run.ok, true, JSON.stringify(run.failed));
      assert.equal(run.exitCode, 0);
      for (const value of [run.wallMs, run.peakRssMb, run.redisCalls]) {
        assert.ok(Number.isFinite(value) && value > 0, `${value}`);
      }
      assert.ok(Number.isFinite(run.slowestCallUs) && run.slowestCallUs >= 0, `${run.slowestCallUs}`);
    }
  });

  it('--only scale-out without a PostgreSQL server: one line saying what to do, exit 5', async () => {
    const result = await runCli(['bench', '--only', 'scale-out', '--postgres', 'postgres://postgres@127.0.0.1:1/postgres', '--out', tempDir()], env);
    assert.equal(result.code, 5, result.stderr);
    assert.match(result.stderr, /^outbox: the scale-out stage cannot create its database on PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:1\/postgres \(.+\): start one there or pass --postgres/m);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  });

  it('rejects an unknown stage before measuring anything', async () => {
    const result = await runCli(['bench', '--only', 'relay,disk'], env);
    assert.equal(result.code, 2);
    const stages = 'producer, relay, consumer, growth, e2e, cli, scale-out, soak, verify';
    assert.match(result.stderr, new RegExp(`--only takes ${stages}, got "relay,disk"`));
  });
});
