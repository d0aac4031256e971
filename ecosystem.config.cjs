// pm2 runs the system from here: `npx pm2 start ecosystem.config.cjs`.
// Settings come from the environment: OUTBOX_DIR (data dir, default ~/outbox), REDIS_URL,
// PORT / HOST (producer), OUTBOX_LOG_DIR (default ./logs; the apps rotate their logs there: OUTBOX_LOG_MAX_SIZE,
// OUTBOX_LOG_RETAIN), and the apps' own OUTBOX_* options
// (OUTBOX_RELAY_HEALTH_PORT / OUTBOX_CONSUMER_HEALTH_PORT: health endpoints on 3100 / 3200, plus the
// pm2 instance number; OUTBOX_DASHBOARD_PORT: the dashboard page on 3300, `off` to leave it out).
const { spawnSync } = require('node:child_process');
const { existsSync, mkdirSync, readdirSync } = require('node:fs');
const { homedir } = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const root = __dirname;
const dataDir = process.env.OUTBOX_DIR || path.join(homedir(), 'outbox');
const logDir = process.env.OUTBOX_LOG_DIR || path.join(root, 'logs');
process.env.PM2_DISABLE_VERSION_CHECK = process.env.PM2_DISABLE_VERSION_CHECK || '1';

if (!existsSync(path.join(root, 'dist', 'apps', 'relay', 'main.js'))) {
  console.error('outbox: the apps are not built: run "npm install" (or "npm run build") first');
  process.exit(1);
}

// pm2 creates the log files 0644, and the log dir 0755 when it is missing: made here first, 0700,
// so that only the owner reads the logs (a dir that exists already is left as it is).
try {
  mkdirSync(logDir, { recursive: true, mode: 0o700 });
} catch (error) {
  console.error(`outbox: cannot make the log dir ${logDir} (OUTBOX_LOG_DIR): ${error.message}`);
  process.exit(1);
}

// Without REDIS_URL the apps use the managed Redis on 127.0.0.1:6379 (OUTBOX_REDIS_PORT), and
// outbox-redis starts a redis-server there unless one already runs. It is listed whenever
// REDIS_URL is unset, so that `pm2 delete` finds it. The apps then get no REDIS_URL: each reads the
// managed Redis's password from <OUTBOX_DIR>/redis/password (shared/tooling/local/managed-redis.ts), which
// is made here, before any app starts, so that none of them can look for it too early. The password
// is never in pm2's environment of the apps (`pm2 env`, `pm2 show`) nor on a command line.
// A Redis Cluster (OUTBOX_REDIS_CLUSTER) is the apps' Redis then: no managed one.
const managedRedis = !process.env.REDIS_URL && !process.env.OUTBOX_REDIS_CLUSTER;
let managedPort = Number(process.env.OUTBOX_REDIS_PORT || 6379);
if (managedRedis) {
  if (!Number.isInteger(managedPort) || managedPort < 1 || managedPort > 65535) {
    console.error(`outbox: OUTBOX_REDIS_PORT must be a port number from 1 to 65535, got "${process.env.OUTBOX_REDIS_PORT}"`);
    process.exit(1);
  }
  const installed = spawnSync('redis-server', ['--version']).status === 0;
  // Where the managed Redis runs or will run: a port held by a Redis outbox did not start (a system
  // Redis on 6379) is left alone, and the managed Redis gets the next free port, recorded in
  // <OUTBOX_DIR>/redis/port (shared/tooling/local/managed-redis.ts). Its password is made here too.
  const prepared = spawnSync(process.execPath, [
    '--input-type=module',
    '-e',
    'const { prepareManagedRedis } = await import(process.argv[1]); await prepareManagedRedis(process.argv[2]);',
    pathToFileURL(path.join(root, 'dist', 'shared', 'tooling', 'local', 'managed-redis.js')).href,
    dataDir,
  ], { cwd: root, encoding: 'utf8' });
  if (prepared.status !== 0) {
    console.error(`outbox: cannot prepare the managed Redis in ${path.join(dataDir, 'redis')}: ${prepared.stderr.trim().split('\n').pop()}`);
    process.exit(1);
  }
  const where = JSON.parse(prepared.stdout.trim().split('\n').pop());
  if (!where.running && !installed) {
    console.error(`outbox: no Redis on 127.0.0.1:${where.port} and redis-server is not installed: apt-get install redis-server, or set REDIS_URL to a running Redis`);
    process.exit(1);
  }
  if (where.leftAlone !== undefined) {
    console.error(`outbox: a Redis outbox did not start listens on 127.0.0.1:${where.leftAlone}: left alone; outbox-redis runs outbox's own on 127.0.0.1:${where.port}`);
  }
  managedPort = where.port;
}

const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([key]) => key.startsWith('OUTBOX_'))),
  OUTBOX_DIR: dataDir,
  ...(managedRedis ? { OUTBOX_REDIS_PORT: String(managedPort) } : process.env.REDIS_URL ? { REDIS_URL: process.env.REDIS_URL } : {}),
  NODE_ENV: 'production',
};

const dashboardOff = (process.env.OUTBOX_DASHBOARD_PORT || '').trim().toLowerCase() === 'off';

// `pm2 start` a second time starts only what is not running: pm2 says "Script already launched"
// and the running apps keep the environment they were started with (a traffic run's OUTBOX_RATE,
// a bad setting). Said here in one line, with what to do. The producer and the relay register in
// <OUTBOX_DIR>/attached/ while they run (shared/runtime/attached-apps.ts).
if (process.argv.includes('start')) {
  let running = [];
  try {
    running = readdirSync(path.join(dataDir, 'attached'))
      .map((name) => /^(.+)\.(\d+)\.json$/.exec(name))
      .filter((match) => {
        if (!match) return false;
        try {
          process.kill(Number(match[2]), 0);
          return true;
        } catch (error) {
          return error.code === 'EPERM';
        }
      })
      .map((match) => `${match[1]} (pid ${match[2]})`);
  } catch {
    // No app has run on this data dir.
  }
  if (running.length > 0) {
    console.error(
      `outbox: ${running.sort().join(', ')} already running: pm2 starts only the apps that are not, and the running ones keep the settings they were started with; ` +
        'to start them with this shell\'s settings: npx pm2 delete ecosystem.config.cjs, then npx pm2 start ecosystem.config.cjs',
    );
  }
}

// Each app writes its log lines to <app>.log itself, rotated by size (OUTBOX_LOG_MAX_SIZE, OUTBOX_LOG_RETAIN;
// shared/runtime/log-file.ts), so that logs stay bounded without pm2-logrotate. pm2's out file is the same
// path, which `pm2 logs` tails; pm2 itself only writes there what bypasses the logger (nothing, normally).
function app(name, script, extra = {}) {
  const outFile = path.join(logDir, `${name}.log`);
  return {
    name,
    script: path.join(root, script),
    cwd: root,
    env: { ...env, ...extra.env, OUTBOX_LOG_FILE: outFile },
    out_file: outFile,
    error_file: path.join(logDir, `${name}.error.log`),
    merge_logs: true,
    // The apps close within 4 s of SIGINT (shared/runtime/shutdown.ts); pm2 sends SIGKILL after this.
    kill_timeout: 5000,
    // No restart_delay: with one, pm2 7 lists an app that exited with a stop_exit_codes code as
    // "waiting restart" (though it never restarts it) instead of "stopped".
    min_uptime: 2000,
    max_restarts: 100,
    // 78 (EX_CONFIG): the app refused a setting (its own, or Redis's) and says why in one log line and
    // in `outbox status` (shared/runtime/run-app.ts); a restart would be refused again.
    stop_exit_codes: [78],
    ...extra.options,
  };
}

module.exports = {
  apps: [
    // treekill false: pm2's stop signal reaches outbox-redis alone, which keeps its redis-server up
    // 1.5 s longer (apps/redis/main.ts), so that the relay and the consumer close with Redis there.
    ...(managedRedis ? [app('outbox-redis', 'dist/apps/redis/main.js', { options: { treekill: false } })] : []),
    // OUTBOX_RELAY_INSTANCES (default 1): more relays take over each other's BullMQ job (outbox chaos runs 2).
    app('outbox-relay', 'dist/apps/relay/main.js', { options: { instances: Number(process.env.OUTBOX_RELAY_INSTANCES || 1) } }),
    // OUTBOX_CONSUMER_INSTANCES (default 1): more consumers, each named consumer-<instance>; with
    // OUTBOX_PARTITIONS > 1 they share the partitions by lease.
    app('outbox-consumer', 'dist/apps/consumer/main.js', { options: { instances: Number(process.env.OUTBOX_CONSUMER_INSTANCES || 1) } }),
    // The producer after the relay and the consumer: pm2 starts the apps in this order, so the
    // pipeline is starting while the first orders are committed rather than after.
    app('outbox-producer', 'dist/apps/producer/main.js', {
      env: { PORT: process.env.PORT || '3000', HOST: process.env.HOST || '127.0.0.1' },
    }),
    // The dashboard page (OUTBOX_DASHBOARD_PORT, default 3300; `off`: not run). PORT / HOST are the
    // producer's, for the dashboard to find its health endpoint.
    ...(dashboardOff
      ? []
      : [app('outbox-dashboard', 'dist/apps/dashboard/main.js', { env: { PORT: process.env.PORT || '3000', HOST: process.env.HOST || '127.0.0.1' } })]),
  ],
};
