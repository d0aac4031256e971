import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from './helpers/cli.js';
import { partitionSuite, P } from './helpers/partition-suite.js';
import { usePostgres } from './helpers/postgres.js';
import { snapshotStores, tempDir } from './helpers/stores.js';
import { RedisServer, testClient } from '../shared/tooling/local/redis-server.js';

// The command line across 3 partitions on one Redis (the cluster's run: partitions-cluster-cli.test.ts).
// The PostgreSQL store across partitions: this file's own database.
const pgDb = usePostgres();

partitionSuite('3 partitions on one Redis', async () => {
  const server = await RedisServer.start();
  const admin = testClient(server.url);
  return {
    target: { redisUrl: server.url, partitions: P },
    allKeys: async () => (await admin.keys('*')).sort(),
    async close() {
      admin.disconnect();
      await server.destroy();
    },
  };
}, pgDb, { apps: true });

describe('commands that do not run across partitions', () => {
  let server: RedisServer;
  before(async () => {
    server = await RedisServer.start();
  });
  after(async () => {
    await server.destroy();
  });

  it('refuse with one line and exit 2, changing nothing', async () => {
    const env = { dir: tempDir(), redisUrl: server.url };
    const init = await runCli(['init'], env);
    assert.equal(init.code, 0, init.stderr);
    const before = await snapshotStores(env.dir, server.url);
    for (const command of [['lab'], ['dualwrite'], ['bench', '--quick'], ['chaos', '--duration', '1s']]) {
      for (const setting of [{ OUTBOX_PARTITIONS: '2' }, { OUTBOX_REDIS_CLUSTER: '127.0.0.1:1' }] as Record<string, string>[]) {
        const result = await runCli(command, { ...env, env: setting });
        assert.equal(result.code, 2, `${command[0]}: ${result.stdout}${result.stderr}`);
        assert.equal(result.stdout, '');
        assert.match(result.stderr, new RegExp(`^outbox: ${command[0]} does not run across partitions yet \\(.*\\): run it with one partition on one Redis(, or give --database postgres://… for a run on its own Redis Cluster)?\\n$`));
      }
    }
    assert.equal(await snapshotStores(env.dir, server.url), before);
  });
});
