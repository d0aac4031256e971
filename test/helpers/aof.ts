import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import type { Redis } from 'ioredis';
import { RedisServer, testClient } from '../../shared/tooling/local/redis-server.js';

/** Bytes Redis has answered but not yet written to its AOF (`aof_buffer_length`). */
async function unwrittenBytes(info: Redis): Promise<number> {
  return Number(/aof_buffer_length:(\d+)/.exec(await info.info('persistence'))?.[1]);
}

/**
 * Brings Redis (through `writer`; `info` reads the same server's INFO) to the state in which a kill
 * loses a write it acknowledged, if its settings allow that state: a 48 MB write under `bulk` first
 * gives the AOF a long fsync to do (below the 64 MB at which Redis would rewrite the AOF). A Redis
 * that fsyncs every second (everysec) starts it within a second, in the background, and until it
 * ends keeps the writes that follow in memory, unwritten, answering them all the same. Then INCRs
 * `acked` until Redis holds one it answered but has not written (the caller kills it right there),
 * for 3 s at most: one that writes and fsyncs before each answer never does, and every write of
 * those 3 s is acknowledged on disk. Resolves the last value acknowledged and whether that state
 * was reached.
 */
export async function writeWhileSyncing(writer: Redis, info: Redis): Promise<{ acked: number; answeredUnwritten: boolean }> {
  await writer.set('bulk', Buffer.alloc(48 * 1024 * 1024, 'x'));
  assert.equal(await unwrittenBytes(info), 0);
  let acked = 0;
  let answeredUnwritten = false;
  const until = Date.now() + 3000;
  while (!answeredUnwritten && Date.now() < until) {
    acked = await writer.incr('acked');
    answeredUnwritten = (await unwrittenBytes(info)) > 0;
  }
  return { acked, answeredUnwritten };
}

/** The assertion's message for the write checked after the restart. */
export const lastAckedMessage = (answeredUnwritten: boolean): string =>
  answeredUnwritten ? 'a write acknowledged before the SIGKILL, not yet in the AOF then' : 'the last write acknowledged';

/**
 * The positive control of a test built on `writeWhileSyncing`: a Redis that fsyncs every second
 * (everysec), in a temp dir (the file system the tests' servers write to), taken to that state.
 * True when it answered a write it had not written, i.e. this disk fsyncs 48 MB slowly enough for
 * the case to be reached here; on tmpfs or a fast disk it is not, and a test that passes proves nothing.
 */
async function everysecAnswersUnwritten(): Promise<boolean> {
  const server = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'everysec']);
  const client = testClient(server.url);
  try {
    return (await writeWhileSyncing(client, client)).answeredUnwritten;
  } finally {
    client.disconnect();
    await server.destroy();
  }
}

/** Skips `t`, saying why, unless this disk lets the case be reached (see `everysecAnswersUnwritten`). Resolves whether it can. */
export async function reachableHere(t: TestContext): Promise<boolean> {
  if (await everysecAnswersUnwritten()) return true;
  t.skip('an everysec Redis answered no write unwritten on this disk (its fsync of 48 MB was too fast): the case cannot be reached here');
  return false;
}
