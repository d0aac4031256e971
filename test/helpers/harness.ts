import assert from 'node:assert/strict';
import { after, before, beforeEach } from 'node:test';
import type { Redis } from 'ioredis';
import { runCli, type CliEnv, type CliResult } from './cli.js';
import { RedisServer, testClient } from '../../shared/tooling/local/redis-server.js';
import { createDatabase } from '../../shared/lab/init-stores.js';
import { storeIdIn, tempDir } from './stores.js';

export interface Harness {
  redis: RedisServer;
  /** A client on the private server, for assertions. */
  client: Redis;
  /** A fresh data dir per test, pointed at the private server. */
  env: CliEnv;
  /** The store id of this test's app.db, which the private Redis serves (empty with `init: false`). */
  storeId: string;
  /** Runs `outbox <args>` and asserts it exited 0. */
  cli: (...args: string[]) => Promise<CliResult>;
}

/**
 * One private redis-server for the test file, and before each test an empty Redis and a fresh data
 * dir (with the lab's app.db created as `outbox init` creates it, unless `init` is false). The
 * database is created in this process, by the function `outbox init` runs: a CLI process per test
 * cost about 0.3 s of CPU, a minute of the suite on 2 cores; init-and-orders and cli test the command.
 */
export function useHarness({ init = true } = {}): Harness {
  const harness = {
    async cli(...args: string[]) {
      const result = await runCli(args, harness.env);
      assert.equal(result.code, 0, `outbox ${args.join(' ')}: ${result.stdout}${result.stderr}`);
      return result;
    },
  } as Harness;

  before(async () => {
    harness.redis = await RedisServer.start();
    harness.client = testClient(harness.redis.url);
  });
  after(async () => {
    harness.client.disconnect();
    await harness.redis.destroy();
  });
  beforeEach(async () => {
    harness.env = { dir: tempDir(), redisUrl: harness.redis.url };
    await harness.client.flushall();
    harness.storeId = '';
    if (init) {
      createDatabase(harness.env.dir);
      harness.storeId = storeIdIn(harness.env.dir);
      // As the first relay would: hand-made messages in tests carry this store id.
      await harness.client.hset('outbox:meta', 'store', harness.storeId);
    }
  });
  return harness;
}
