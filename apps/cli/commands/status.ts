import type { ArgumentsCamelCase, Argv } from 'yargs';
import type { Partitions } from '../../../shared/outbox/redis/partitions.js';
import type { Db } from '../../../shared/outbox/store/open-database.js';
import { sleep } from '../../../shared/outbox/sleep.js';
import { clearRefusal, describeRefusal, readRefusals } from '../../../shared/runtime/refusals.js';
import type { AppHealth } from '../../../shared/runtime/health/app-health.js';
import { explainError, isConnectionError } from '../../../shared/outbox/errors/explain-error.js';
import { collectDegradedStatus, formatDegradedStatus } from '../../../shared/operations/status-degraded.js';
import {
  collectStatus,
  formatStatus,
  sqliteStatusReads,
  statusSettings,
  type StatusOptions,
  type StatusStoreReads,
} from '../../../shared/operations/status.js';
import { flagOptions, readSettings } from '../../../shared/runtime/config/settings.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, openPartitions, withDb, withPg } from '../stores.js';

interface Args extends GlobalArgs {
  json: boolean;
  watch: boolean;
}

export const command = 'status';
export const describe = 'one screen: pending rows, queue, processing lists, processed, parked, dead letters, relay, apps that refused to start';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('json', { type: 'boolean', default: false, describe: 'print JSON (with --watch: one line per second)' })
    .option('watch', { type: 'boolean', default: false, describe: 'redraw the screen every second until Ctrl-C (SIGINT) or SIGTERM, then exit 0' })
    .options(flagOptions(statusSettings));

/** How often --watch redraws, ms. */
const WATCH_EVERY_MS = 1000;

/** One screen (or one JSON document) of the stores and the apps now. */
async function render(
  db: Db | StatusStoreReads,
  partitions: Partitions,
  dir: string,
  json: boolean,
  watch: boolean,
  options: StatusOptions,
): Promise<string> {
  const status = await collectStatus(db, partitions, undefined, options);
  return screen(status, status.apps, formatStatus(status), dir, json, watch);
}

/**
 * The screen with the refusals below: apps that exited with EXIT_CONFIG (pm2 shows them stopped),
 * why, from <dir>/refused/. A refusal of an app that answers its health endpoint now (this
 * deployment's, running) is stale: written by a process that did not run (a second start that
 * found the port taken, say) while that app ran on. It is deleted, not shown.
 */
function screen(status: object, apps: AppHealth[], lines: string[], dir: string, json: boolean, watch: boolean): string {
  const running = new Set(apps.filter((a) => a.state === 'ok' || a.state === 'unhealthy').map((a) => a.app));
  const refused = readRefusals(dir).filter((refusal) => {
    if (!running.has(refusal.app)) return true;
    clearRefusal(dir, refusal.app);
    return false;
  });
  if (json) return watch ? JSON.stringify({ at: new Date().toISOString(), ...status, refused }) : JSON.stringify({ ...status, refused }, null, 2);
  return [...lines, ...refused.map((refusal) => `REFUSED     ${describeRefusal(refusal)}`)].join('\n');
}

/** The error's one line when it is Redis's (unreachable, lost mid-read): status then shows what it can without Redis. */
function redisProblem(error: unknown, connecting: boolean): string | undefined {
  const expected = explainError(error);
  if (expected === null || expected.exitCode !== 5) return undefined;
  if (connecting || isConnectionError(error)) return expected.message;
  return undefined;
}

/**
 * Redraws every second until SIGINT or SIGTERM: on a terminal the screen is cleared first, else each
 * screen follows the last after a blank line (a log, a pipe); --json writes one line per second.
 * A signal ends the wait at once, or lets the screen being read finish; the stores are then closed.
 */
async function watch(draw: () => Promise<string>, json: boolean): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const terminal = process.stdout.isTTY === true && !json;
  try {
    while (!stop.signal.aborted) {
      const started = Date.now();
      const screen = await draw();
      if (json) process.stdout.write(`${screen}\n`);
      else {
        const title = `outbox status at ${new Date().toISOString()}, every ${WATCH_EVERY_MS / 1000} s (Ctrl-C to stop)`;
        process.stdout.write(terminal ? `\x1b[H\x1b[2J${title}\n\n${screen}\n` : `${title}\n${screen}\n\n`);
      }
      await sleep(Math.max(0, WATCH_EVERY_MS - (Date.now() - started)), stop.signal);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  // Not withStores: a Redis that serves another store is shown here, not refused.
  const config = configOf(argv);
  // Checked before anything connects: a bad threshold is one line, exit 2.
  const { warnParked, warnDeadAge } = readSettings(statusSettings, argv);
  const options: StatusOptions = { warnParked, warnDeadAgeMs: warnDeadAge };
  const show = async (store: Db | StatusStoreReads) => {
    const reads = 'prepare' in store ? sqliteStatusReads(store) : store;
    // Redis is connected on the first screen and again after it was lost: --watch keeps drawing
    // the store's side meanwhile, and the whole screen once Redis is back.
    let redis: Awaited<ReturnType<typeof openPartitions>> | undefined;
    let degraded: string | undefined;
    const draw = async () => {
      let connecting = false;
      try {
        if (redis === undefined) {
          connecting = true;
          redis = await openPartitions(config);
          connecting = false;
        }
        const drawn = await render(store, redis.partitions, config.dir, argv.json, argv.watch, options);
        degraded = undefined;
        return drawn;
      } catch (error) {
        const problem = redisProblem(error, connecting);
        if (problem === undefined) throw error;
        await redis?.close().catch(() => {});
        redis = undefined;
        degraded = problem;
        const status = await collectDegradedStatus(reads, config.namespace, problem);
        return screen({ degraded: true, ...status }, status.apps, formatDegradedStatus(status), config.dir, argv.json, argv.watch);
      }
    };
    try {
      if (argv.watch) await watch(draw, argv.json);
      else {
        console.log(await draw());
        // The screen is shown; stderr and the exit code still say that a store is unusable, as for any command.
        if (degraded !== undefined) {
          console.error(`outbox: ${degraded}`);
          process.exitCode = 5;
        }
      }
    } finally {
      await redis?.close().catch(() => {});
    }
  };
  if (onPostgres(config)) {
    const { pgStatusReads } = await import('../../../shared/operations/status.js');
    await withPg(config, (pool) => show(pgStatusReads(pool, config.dir)));
  } else await withDb(config, show, { outboxOnly: true });
}
