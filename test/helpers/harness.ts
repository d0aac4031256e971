import assert from 'node:assert/strict';
import { after, before, beforeEach } from 'node:test';
import type { Redis } from 'ioredis';
import { runCli, type CliEnv, type CliResult } from './cli.js';
import { RedisServer, testClient } from '../../shared/local/redis-server.js';
import { tempDir } from './stores.js';

export interface Harness {
  redis: RedisServer;
  /** A client on the private server, for assertions. */
  client: Redis;
  /** A fresh data dir per test, pointed at the private server. */
  env: CliEnv;
  /** Runs `outbox <args>` and asserts it exited 0. */
  cli: (...args: string[]) => Promise<CliResult>;
}

/**
 * One private redis-server for the test file, and before each test an empty Redis and a fresh data
 * dir (with `outbox init` run, unless `init` is false).
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
    if (init) await harness.cli('init');
  });
  return harness;
}
