import { DEFAULT_RELAY_BATCH_SIZE } from '../../outbox/relay/relay.js';
import { count, duration, optionalDuration, readSettings, type Argv, type ValuesOf } from './settings.js';
import { healthSettings } from './health-config.js';
import { storeSettings } from './store-settings.js';

/** Rows per relay batch: the relay app and `outbox relay` share the definition. */
export const relayBatchSize = count({
  flag: 'batch-size',
  env: 'OUTBOX_RELAY_BATCH_SIZE',
  default: String(DEFAULT_RELAY_BATCH_SIZE),
  min: 1,
  max: 100_000,
  describe: 'rows per batch (one push script and one UPDATE transaction each)',
});

/** The relay app's settings (outbox-relay), each with its flag, variable and default. */
export const relaySettings = {
  ...storeSettings,
  /** The job scheduler makes a relay job this often. Default 1s. */
  everyMs: duration({ flag: 'every', env: 'OUTBOX_RELAY_EVERY', retired: ['OUTBOX_RELAY_EVERY_MS'], default: '1s', min: 10, max: 3_600_000, describe: 'how often the scheduler makes a relay job' }),
  /** How long one job keeps relaying. Default 1.5s: longer than `everyMs`, so relaying is continuous. */
  sliceMs: duration({ flag: 'slice', env: 'OUTBOX_RELAY_SLICE', retired: ['OUTBOX_RELAY_SLICE_MS'], default: '1.5s', min: 1, max: 3_600_000, describe: 'how long one relay job keeps relaying' }),
  /** Pause within a slice when nothing is PENDING. Default 5ms. */
  pollMs: duration({ flag: 'poll', env: 'OUTBOX_RELAY_POLL', retired: ['OUTBOX_RELAY_POLL_MS'], default: '5ms', min: 1, max: 60_000, describe: 'pause when nothing is PENDING' }),
  batchSize: relayBatchSize,
  /** BullMQ lock of a relay job; app.db waits are capped at a quarter of it. Default 4s. */
  lockDurationMs: duration({
    flag: 'lock-duration',
    env: 'OUTBOX_RELAY_LOCK',
    retired: ['OUTBOX_RELAY_LOCK_MS'],
    default: '4s',
    min: 100,
    max: 600_000,
    describe: "BullMQ lock of a relay job; a dead relay's job is taken over after about this + 2s, and app.db waits are capped at a quarter of it",
  }),
  /**
   * Prune PUBLISHED rows the consumer applied once older than this, on a schedule of its own. On by
   * default (7d, the dedupe window's default) so that the store stays bounded; `off` keeps every row.
   */
  pruneOlderThanMs: {
    ...optionalDuration({
      flag: 'prune-older-than',
      env: 'OUTBOX_PRUNE_OLDER_THAN',
      describe: 'prune PUBLISHED rows the consumer applied once they are older than this; off: no pruning',
    }),
    default: '7d',
  },
  /** How often to prune, when pruning is on. Default 5m: a run finds a few minutes of rows to delete. */
  pruneEveryMs: duration({
    flag: 'prune-every',
    env: 'OUTBOX_PRUNE_EVERY',
    default: '5m',
    min: 100,
    max: 7 * 86_400_000,
    describe: 'how often to prune, unless OUTBOX_PRUNE_OLDER_THAN is off',
  }),
  ...healthSettings('relay'),
};

export type RelayConfig = ValuesOf<typeof relaySettings>;

/** The relay app's settings from the flags, else the environment, else the defaults; checked. */
export function relayConfig(argv: Argv = {}, env: NodeJS.ProcessEnv = process.env): RelayConfig {
  return readSettings(relaySettings, argv, env);
}
