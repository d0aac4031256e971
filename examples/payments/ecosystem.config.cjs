// pm2 runs the payments example from here, after `npm run build`:
//   REDIS_URL=redis://127.0.0.1:6379 npx pm2 start examples/payments/ecosystem.config.cjs
// Three apps, apart from the orders lab's (ecosystem.config.cjs at the root):
//   payments-producer   captures and refunds into <PAYMENTS_DIR>/app.db (payments + outbox, one transaction each)
//   payments-relay      the project's relay app (dist/apps/relay/main.js) on that database, namespace "payments"
//   payments-consumer   the public createConsumer in database mode: a ledger in <PAYMENTS_DIR>/ledger.db
// Settings come from the environment: REDIS_URL (required: this example brings no Redis of its
// own), PAYMENTS_DIR (data dir, default ~/outbox-payments), PAYMENTS_NAMESPACE (prefix of its Redis
// keys, default "payments": it can share a Redis with the lab), OUTBOX_LOG_DIR (default ./logs),
// PAYMENTS_RATE / PAYMENTS_ACCOUNTS / PAYMENTS_REFUND_SHARE (producer), PAYMENTS_LEASE_MS /
// PAYMENTS_BATCH_SIZE (consumer), PAYMENTS_CONSUMER_INSTANCES (default 1; they share the ledger
// file), PAYMENTS_RELAY_INSTANCES (default 1), and the relay's own OUTBOX_RELAY_* settings.
const { existsSync, mkdirSync } = require('node:fs');
const { homedir } = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..');
const dataDir = path.resolve(process.env.PAYMENTS_DIR || path.join(homedir(), 'outbox-payments'));
const logDir = process.env.OUTBOX_LOG_DIR || path.join(root, 'logs');
process.env.PM2_DISABLE_VERSION_CHECK = process.env.PM2_DISABLE_VERSION_CHECK || '1';

function fail(message) {
  console.error(`payments: ${message}`);
  process.exit(1);
}

if (!existsSync(path.join(root, 'dist', 'examples', 'payments', 'consumer-app.js')) || !existsSync(path.join(root, 'dist', 'apps', 'relay', 'main.js'))) {
  fail('the apps are not built: run "npm run build" first');
}
if (!process.env.REDIS_URL) fail('REDIS_URL is not set: point it at your Redis, e.g. REDIS_URL=redis://127.0.0.1:6379');
const instances = (name) => {
  const raw = process.env[name] || '1';
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > 16) fail(`${name} must be a whole number from 1 to 16, got "${raw}"`);
  return Number(raw);
};
const consumerInstances = instances('PAYMENTS_CONSUMER_INSTANCES');
const relayInstances = instances('PAYMENTS_RELAY_INSTANCES');
try {
  mkdirSync(logDir, { recursive: true, mode: 0o700 });
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
} catch (error) {
  fail(`cannot make ${error.path}: ${error.message}`);
}

const env = {
  // The relay's settings (OUTBOX_RELAY_*), the crash points, the log level: as given.
  ...Object.fromEntries(Object.entries(process.env).filter(([key]) => key.startsWith('OUTBOX_') || key.startsWith('PAYMENTS_'))),
  // What every app reads: the relay app serves <OUTBOX_DIR>/app.db, the payments service's database.
  OUTBOX_DIR: dataDir,
  OUTBOX_NAMESPACE: process.env.PAYMENTS_NAMESPACE || 'payments',
  // The lab's relay has its health endpoint on 3100: this one is off unless asked for.
  OUTBOX_RELAY_HEALTH_PORT: process.env.PAYMENTS_RELAY_HEALTH_PORT || 'off',
  REDIS_URL: process.env.REDIS_URL,
  NODE_ENV: 'production',
};

function app(name, script, options = {}) {
  return {
    name,
    script: path.join(root, script),
    cwd: root,
    env,
    out_file: path.join(logDir, `${name}.log`),
    error_file: path.join(logDir, `${name}.error.log`),
    merge_logs: true,
    // The apps stop within 4 s of SIGINT; pm2 sends SIGKILL after this.
    kill_timeout: 5000,
    min_uptime: 2000,
    max_restarts: 100,
    // 78 (EX_CONFIG): the app refused a setting, in one line of its error log; a restart would be refused again.
    stop_exit_codes: [78],
    ...options,
  };
}

module.exports = {
  apps: [
    app('payments-producer', 'dist/examples/payments/producer-app.js'),
    app('payments-relay', 'dist/apps/relay/main.js', { instances: relayInstances }),
    app('payments-consumer', 'dist/examples/payments/consumer-app.js', { instances: consumerInstances }),
  ],
};
