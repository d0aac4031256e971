import type { ArgumentsCamelCase, Argv } from 'yargs';
import type { Partitions } from '../../../shared/outbox/redis/partitions.js';
import type { Db } from '../../../shared/outbox/store/open-database.js';
import { sleep } from '../../../shared/outbox/sleep.js';
import { describeRefusal, readRefusals } from '../../../shared/runtime/refusals.js';
import {
  collectStatus,
  formatStatus,
  statusSettings,
  type StatusOptions,
  type StatusStoreReads,
} from '../../../shared/operations/status.js';
import { flagOptions, readSettings } from '../../../shared/runtime/config/settings.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withDb, withPartitions, withPg } from '../stores.js';

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
  // Apps that exited with EXIT_CONFIG (pm2 shows them stopped): why, from <dir>/refused/.
  const refused = readRefusals(dir);
  if (json) return watch ? JSON.stringify({ at: new Date().toISOString(), ...status, refused }) : JSON.stringify({ ...status, refused }, null, 2);
  return [...formatStatus(status), ...refused.map((refusal) => `REFUSED     ${describeRefusal(refusal)}`)].join('\n');
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
  const show = (store: Db | StatusStoreReads) =>
    withPartitions(config, async (partitions) => {
      const draw = () => render(store, partitions, config.dir, argv.json, argv.watch, options);
      if (argv.watch) await watch(draw, argv.json);
      else console.log(await draw());
    });
  if (onPostgres(config)) {
    const { pgStatusReads } = await import('../../../shared/operations/status.js');
    await withPg(config, (pool) => show(pgStatusReads(pool, config.dir)));
  } else await withDb(config, show);
}
