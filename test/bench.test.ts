import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/stores.js';

// outbox bench brings its own redis-server, data and pm2 home. A smoke run: it checks that every
// stage runs and reports, never how fast (benchmarks are not timed tests).
const env = { dir: '/nonexistent', redisUrl: 'redis://127.0.0.1:1' };

describe('outbox bench', () => {
  it('--quick runs every stage and writes the figures as JSON and a markdown table', async () => {
    const out = tempDir();
    const result = await runCli(['bench', '--quick', '--out', out], env);
    assert.equal(result.code, 0, result.stderr);
    for (const stage of [
      'producer, 1 order per transaction',
      'producer, batch API',
      'relay',
      'relay vs naive',
      'consumer, Redis effects (10 % duplicates)',
      'consumer, database mode (10 % duplicates)',
      'consumer vs naive',
      'end to end under pm2',
      'relay pass, 0 vs',
      'relay RSS over',
      'consumer RSS over',
      'prune',
      'CLI start-up, median of',
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
      figures.cli.nodeMs,
      figures.cli.helpMs,
      figures.cli.reportMs,
    ]) {
      assert.ok(Number.isFinite(value) && value > 0, `${value}`);
    }
    assert.equal(figures.growth.prune.deleted, figures.sizes.growthPublished);
    // One end-to-end run per rate, each split into relay and consumer parts taken where they
    // happen (Redis's clock at the push and at the apply): no part comes out negative.
    assert.deepEqual(figures.e2e.map((run: { rate: number }) => run.rate), figures.sizes.e2eRates);
    assert.equal(figures.sizes.e2eRates.length, 2);
    for (const run of figures.e2e) assert.equal(run.negativeLags, 0);
    assert.equal((result.stdout.match(/^\| end to end under pm2, /gm) ?? []).length, 2);
    // Applied events/s leave the re-deliveries out: fewer than the messages taken.
    assert.ok(figures.consumer.consumer.perSecond < figures.consumer.consumerMessages.perSecond);
    assert.ok(figures.consumer.database.perSecond < figures.consumer.databaseMessages.perSecond);
  });

  it('rejects an unknown stage before measuring anything', async () => {
    const result = await runCli(['bench', '--only', 'relay,disk'], env);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /--only takes producer, relay, consumer, growth, e2e, cli, got "relay,disk"/);
  });
});
