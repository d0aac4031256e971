import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { PG_SERVER_URL } from './helpers/postgres.js';
import { tempDir } from './helpers/stores.js';

// outbox chaos on PostgreSQL makes a database of its own on the server (dropped afterwards), its own
// Redis Cluster and pm2 home: these settings only point elsewhere.
const env = { dir: '/nonexistent', redisUrl: 'redis://127.0.0.1:1' };

describe('outbox chaos on PostgreSQL and a Redis Cluster', () => {
  it('a short run that kills relays among four and consumers among three and restarts cluster nodes, with and without their data, ends with nothing lost, applied twice or out of order', async () => {
    const json = join(tempDir(), 'chaos.json');
    // The faults are dealt from a deck of the four targets: the first four (one every 0.75-2.25 s, fewer
    // in 20 s only on a very loaded machine) hit each target once; one that finds no process to kill stays due.
    const result = await runCli(
      ['chaos', '--database', PG_SERVER_URL, '--duration', '20s', '--rate', '300', '--kill-every', '1500ms', '--seed', '3', '--targets', 'relay,consumer,cluster-node,cluster-node-wipe', '--json', json],
      env,
    );
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /^4 relays, 3 consumers, 4 partitions$/m);
    assert.match(result.stdout, /CHAOS OK: nothing lost, nothing applied twice, nothing applied out of order/);
    const figures = JSON.parse(readFileSync(json, 'utf8'));
    for (const kind of ['kill relay', 'kill consumer', 'cluster node restarted', 'cluster node wiped']) assert.ok(figures.faults[kind] >= 1, `no ${kind}: ${JSON.stringify(figures.faults)}`);
    const { ledger } = figures;
    assert.ok(ledger.events > 1000 && ledger.events / ledger.aggregates > 3, `${ledger.events} events over ${ledger.aggregates} aggregates`);
    assert.deepEqual(
      { lost: ledger.lost, appliedTwice: ledger.appliedTwice, outOfOrder: ledger.outOfOrder, extra: ledger.extra, parked: ledger.parked, dead: ledger.deadLettered },
      { lost: [], appliedTwice: [], outOfOrder: [], extra: 0, parked: 0, dead: 0 },
    );
    assert.equal(figures.ok, true);
  });
});
