// The private 3-master Redis Cluster lives with the local servers (outbox chaos starts one too).
export { startRedisCluster, type RedisCluster } from '../../shared/tooling/local/redis-cluster.js';
