import { execFile } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { openDatabase } from '../../outbox/store/open-database.js';
import { createDatabase } from '../../lab/init-stores.js';
import { REPO_ROOT } from '../local/pm2.js';
import { serveStore } from './measure.js';
import { progress } from './progress.js';

export interface CliFigures {
  runs: number;
  /** Medians of the wall time of whole processes, spawn to exit (ms). */
  nodeMs: number;
  helpMs: number;
  reportMs: number;
  /** The 1-minute load average when the stage started: start-up times follow it on a shared machine. */
  loadAverage: number;
}

const CLI = join(REPO_ROOT, 'dist', 'apps', 'cli', 'main.js');
const execFileAsync = promisify(execFile);

/**
 * The median wall time of `runs` runs of `node <args>`, one after the other; each must exit 0. The
 * settings go through `env`: a Redis URL may carry a password, which a command line would show (`ps`).
 */
async function medianRunMs(args: string[], runs: number, tick: () => void, env: Record<string, string> = {}): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await execFileAsync(process.execPath, args, { env: { ...process.env, ...env } });
    times.push(performance.now() - started);
    tick();
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(runs / 2)];
}

/**
 * How long the CLI takes to start: `outbox --help` (yargs and every command's options, nothing
 * else) and `outbox report` (opens app.db, connects to Redis, counts), against node starting an
 * empty script, the floor no command can go below.
 */
export async function benchCli(workspace: string, client: Redis, redisUrl: string, runs: number): Promise<CliFigures> {
  const dir = join(workspace, 'cli');
  createDatabase(dir);
  const db = openDatabase(dir);
  try {
    await serveStore(client, db);
  } finally {
    db.close();
  }
  const loadAverage = loadavg()[0];
  const bar = progress('CLI start-up', runs * 3);
  const tick = () => bar.tick();
  const figures: CliFigures = {
    runs,
    nodeMs: await medianRunMs(['-e', ''], runs, tick),
    helpMs: await medianRunMs([CLI, '--help'], runs, tick),
    reportMs: await medianRunMs([CLI, 'report'], runs, tick, { OUTBOX_DIR: dir, REDIS_URL: redisUrl }),
    loadAverage,
  };
  bar.finish();
  return figures;
}
