import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createConsumerEngine, emptyStats } from '../shared/outbox/consumer/consumer.js';
import { driveRounds, takingConnection, type RoundEngine } from '../shared/outbox/consumer/drive-rounds.js';
import { closeRedis, connectRedis } from '../shared/outbox/redis/connect.js';
import { keys } from '../shared/outbox/redis/keys.js';
import { useHarness } from './helpers/harness.js';
import { monitorWhile } from './helpers/redis-monitor.js';

const h = useHarness();

/** Keeps this thread busy for `ms`, as a stopped process or a long GC would. */
function stall(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
}

describe('the consumer loop writes a take when it decides it', () => {
  it('a stall right after a take is decided does not delay it: Redis runs it at once, not once the stall is over (the lease check is made at the decision)', async () => {
    const STALL_MS = 400;
    const redis = await connectRedis(h.env.redisUrl);
    try {
      const engine = createConsumerEngine(redis, { consumerId: 'w', handler: () => [] });
      let decidedAt = 0;
      // The real take, then the thread stalls before anything else can run: no tick passes.
      const stalling: RoundEngine = {
        ...engine,
        take(connection) {
          const taking = engine.take(connection);
          decidedAt = Date.now();
          stall(STALL_MS);
          return taking;
        },
      };
      const ranAt: number[] = [];
      const into = keys.processing('w');
      await monitorWhile(
        h.env.redisUrl,
        (args, atMs) => {
          // (EVAL on a connection's first use of the script, EVALSHA after.)
          if (/^eval(sha)?$/i.test(args[0] ?? '') && args[2] === '3' && args[4] === into) ranAt.push(atMs);
        },
        // An empty queue: the drain takes once and ends.
        () => driveRounds(redis, stalling, { until: 'empty', connect: () => takingConnection(redis), stats: emptyStats() }).done,
      );
      assert.equal(ranAt.length, 1, `takes seen: ${ranAt.length}`);
      const lateMs = ranAt[0] - decidedAt;
      assert.ok(lateMs < STALL_MS / 2, `Redis ran the take ${Math.round(lateMs)} ms after it was decided, with the thread stalled for ${STALL_MS} ms`);
    } finally {
      await closeRedis(redis);
    }
  });
});
