import { partitionSuite, P } from './helpers/partition-suite.js';
import { usePostgres } from './helpers/postgres.js';
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.js';
import { connectTarget } from '../shared/outbox/redis/connect-partitions.js';
import { mastersOf } from '../shared/outbox/redis/cluster-client.js';

// The command line across 3 partitions on a 3-master Redis Cluster: the scenario of
// partitions-cli.test.ts, in a file of its own so that the two run side by side.
// The PostgreSQL store across partitions: this file's own database.
const pgDb = usePostgres();

partitionSuite('3 partitions on a 3-master Redis Cluster', async () => {
  const cluster: RedisCluster = await startRedisCluster();
  const target = { redisUrl: 'redis://127.0.0.1:1', redisCluster: cluster.nodes.join(','), partitions: P };
  const admin = await connectTarget(target, { name: 'test-admin' });
  return {
    target,
    allKeys: async () => (await Promise.all(mastersOf(admin).map((node) => node.keys('*')))).flat().sort(),
    async close() {
      admin.disconnect();
      await cluster.stop();
    },
  };
}, pgDb);
