import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.js';

let cluster: RedisCluster;
before(async () => {
  cluster = await startRedisCluster();
});
after(async () => {
  await cluster?.stop();
});

it('smoke', async () => {
  assert.equal(cluster.nodes.length, 3);
  await cluster.restart(1);
});
