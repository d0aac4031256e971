import { DEFAULT_MAX_ATTEMPTS } from '../../outbox/consumer/consumer.js';
import { DEFAULT_LEASE_MS } from '../../outbox/consumer/inbox/database-consumer.js';
import { DEFAULT_PARTITION_LEASE_MS } from '../../outbox/consumer/partition-leases.js';
import { DEFAULT_DEDUPE_WINDOW_MS } from '../../outbox/redis/dedupe-window.js';
import { DEFAULT_RELAY_BATCH_SIZE } from '../../outbox/relay/relay.js';
import { statusSettings } from '../../operations/status.js';
import { consumerSettings } from '../../runtime/config/consumer-config.js';
import { dashboardSettings } from '../../runtime/config/dashboard-config.js';
import { producerSettings } from '../../runtime/config/producer-config.js';
import { managedRedisSettings } from '../../runtime/config/redis-config.js';
import { relaySettings } from '../../runtime/config/relay-config.js';
import type { Setting, Settings } from '../../runtime/config/settings.js';
import { storeSettings } from '../../runtime/config/store-settings.js';
import { logSettings } from '../../runtime/run-app.js';

/** Who reads a group of settings, as the reference names it, and the settings themselves. */
const READERS: { name: string; settings: Settings }[] = [
  { name: 'outbox-producer', settings: { ...producerSettings, ...logSettings } },
  { name: 'outbox-relay', settings: { ...relaySettings, ...logSettings } },
  { name: 'outbox-consumer', settings: { ...consumerSettings, ...logSettings } },
  { name: 'outbox-dashboard', settings: { ...dashboardSettings, ...logSettings } },
  { name: 'outbox-redis', settings: { ...managedRedisSettings, ...logSettings } },
  { name: 'outbox (every command)', settings: storeSettings },
  { name: 'outbox status', settings: statusSettings },
];

/**
 * Variables read outside the settings modules: by ecosystem.config.cjs, which pm2 loads as
 * CommonJS, and the crash points of the chaos runs. `source` is the code that reads each, with its
 * default: test/reference-docs.test.ts checks that the file still has it.
 */
export const OTHER_VARIABLES = [
  { env: 'OUTBOX_LOG_DIR', default: './logs', file: 'ecosystem.config.cjs', source: "process.env.OUTBOX_LOG_DIR || path.join(root, 'logs')", describe: "where pm2 writes each app's <app>.log; made 0700 when missing" },
  { env: 'OUTBOX_RELAY_INSTANCES', default: '1', file: 'ecosystem.config.cjs', source: 'process.env.OUTBOX_RELAY_INSTANCES || 1', describe: 'how many relay processes pm2 runs; one relays at a time, another takes over a dead one\'s job' },
  { env: 'OUTBOX_CONSUMER_INSTANCES', default: '1', file: 'ecosystem.config.cjs', source: 'process.env.OUTBOX_CONSUMER_INSTANCES || 1', describe: 'how many consumer processes pm2 runs (consumer-0, consumer-1, …)' },
  { env: 'OUTBOX_DASHBOARD_PORT=off', default: 'the dashboard runs', file: 'ecosystem.config.cjs', source: "(process.env.OUTBOX_DASHBOARD_PORT || '').trim().toLowerCase() === 'off'", describe: 'leaves the dashboard app out' },
  { env: 'PM2_DISABLE_VERSION_CHECK', default: '1', file: 'ecosystem.config.cjs', source: "process.env.PM2_DISABLE_VERSION_CHECK || '1'", describe: "pm2's version check, which needs the internet: off for the apps" },
  { env: 'OUTBOX_CRASH_POINTS', default: 'none', file: 'shared/outbox/crash-point.ts', source: "process.env.OUTBOX_CRASH_POINTS ?? ''", describe: 'tests and chaos only: the crash points (comma-separated) at which the process kills itself' },
  { env: 'OUTBOX_CRASH_MODE', default: 'at once', file: 'shared/outbox/crash-point.ts', source: "process.env.OUTBOX_CRASH_MODE === 'armed'", describe: 'tests and chaos only: armed: a crash point fires once, after SIGUSR2' },
  { env: 'OUTBOX_CRASH_ARM_FILE', default: 'none', file: 'shared/outbox/crash-point.ts', source: 'process.env.OUTBOX_CRASH_ARM_FILE', describe: 'tests and chaos only: with armed, SIGUSR2 arms only the points this file names' },
  { env: 'OUTBOX_CRASH_LOG', default: 'none', file: 'shared/outbox/crash-point.ts', source: 'process.env.OUTBOX_CRASH_LOG', describe: 'tests and chaos only: a file that gets the name of each point that fired' },
];

/** The library's defaults, exported constants of its modules; each option's own text is in the API reference. */
const LIBRARY_DEFAULTS: [string, string][] = [
  ['`createRelay` `batchSize`', `${DEFAULT_RELAY_BATCH_SIZE}`],
  ['`createConsumer` `maxAttempts`', `${DEFAULT_MAX_ATTEMPTS}`],
  ['`createConsumer` `dedupeWindowMs`', `${DEFAULT_DEDUPE_WINDOW_MS} (${DEFAULT_DEDUPE_WINDOW_MS / 86_400_000} days)`],
  ['`createConsumer` `partitionLeaseMs`', `${DEFAULT_PARTITION_LEASE_MS}`],
  ['`createConsumer` `leaseMs` (database mode)', `${DEFAULT_LEASE_MS}`],
];

interface Row {
  env?: string;
  flags: Set<string>;
  setting: Setting<unknown>;
  readers: string[];
}

/**
 * docs/reference/configuration.md: every setting of the apps and the CLI (variable, flag, default,
 * range, who reads it) from the settings modules of shared/runtime/config/, the log settings of
 * shared/runtime/run-app.ts and `outbox status`'s thresholds; then the variables read elsewhere and
 * the library's default constants.
 */
export function configReference(): string {
  const rows = new Map<string, Row>();
  for (const { name, settings } of READERS) {
    for (const setting of Object.values(settings)) {
      const key = setting.env ?? `--${setting.flag}`;
      const row = rows.get(key) ?? { env: setting.env, flags: new Set<string>(), setting, readers: [] };
      if (setting.flag) row.flags.add(`--${setting.flag}`);
      if (!row.readers.includes(name)) row.readers.push(name);
      rows.set(key, row);
    }
  }
  const sorted = [...rows.values()].sort((a, b) => (a.env ?? '~').localeCompare(b.env ?? '~'));
  const lines = [
    '# Configuration reference',
    '',
    '<!-- Generated by `npm run docs` from shared/runtime/config/ and the constants of shared/outbox/: do not edit. test/reference-docs.test.ts checks it is current. -->',
    '',
    'Every setting of the five apps and of the `outbox` CLI. An app reads its flag, else the variable,',
    'else the default; an empty variable counts as unset. A value out of range is refused at start:',
    'one line, exit code 78 (the CLI: exit code 2). Durations take a unit (`200ms`, `1.5s`, `7d`).',
    '[Configuration](../configuration.md) says when to change them; [the CLI reference](cli.md) lists',
    "each command's own options.",
    '',
    '## The apps and the CLI',
    '',
    '| variable | flag | default | values | read by | what it does |',
    '|---|---|---|---|---|---|',
  ];
  for (const row of sorted) {
    const { setting } = row;
    lines.push(
      `| ${code(row.env ?? '')} | ${[...row.flags].map(code).join(', ')} | ${code(defaultOf(setting))} | ${cell(setting.range ?? '')} | ${row.readers.join(', ')} | ${cell(setting.describe)} |`,
    );
  }
  const retired = sorted.flatMap((row) => (row.setting.retired ?? []).map((old) => `${code(old)} (now ${code(row.env ?? '')})`));
  lines.push('', `Retired names, refused while still set: ${retired.join(', ')}.`);
  lines.push('', '## Read elsewhere', '', '| variable | default | read by | what it does |', '|---|---|---|---|');
  for (const v of OTHER_VARIABLES) lines.push(`| ${code(v.env)} | ${cell(v.default)} | ${code(v.file)} | ${cell(v.describe)} |`);
  lines.push('', '## The library', '', 'The defaults of `createRelay` and `createConsumer` options, from the constants the code uses.', 'The [API reference](api.md) describes every option.', '', '| option | default |', '|---|---|');
  for (const [option, value] of LIBRARY_DEFAULTS) lines.push(`| ${option} | ${code(value)} |`);
  return `${lines.join('\n')}\n`;
}

function defaultOf(setting: Setting<unknown>): string {
  if (setting.defaultText !== undefined) return setting.defaultText;
  return typeof setting.default === 'string' && setting.default !== '' ? setting.default : 'none';
}

function code(text: string): string {
  return text === '' ? '' : `\`${text.replace(/\|/g, '\\|')}\``;
}

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}
