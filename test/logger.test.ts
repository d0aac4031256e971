import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { addLogSecret } from '../shared/outbox/log-secrets.js';
import { createLogger, parseLogLevel, type LogLevel } from '../shared/outbox/logger.js';
import { RedisServer } from '../shared/tooling/local/redis-server.js';
import { waitFor } from '../shared/tooling/local/wait-for.js';
import { startApp, stopApp } from './helpers/apps.js';
import { useHarness } from './helpers/harness.js';
import { count } from './helpers/stores.js';

const RELAY = 'dist/apps/relay/main.js';
const CONSUMER = 'dist/apps/consumer/main.js';
const FAST = ['--every', '300ms', '--slice', '300ms'];

function capture(level?: LogLevel) {
  const lines: string[] = [];
  const log = createLogger('x', (line) => lines.push(line), { level });
  return { log, lines, entries: () => lines.map((line) => JSON.parse(line)) };
}

describe('logger', () => {
  it('writes one JSON object per line: level as a word, ISO time, app, msg, then the fields', () => {
    const { log, lines, entries } = capture();
    log.warn('redis unavailable', { attempt: 2 });
    const [entry] = entries();
    assert.deepEqual(Object.keys(entry), ['level', 'time', 'app', 'msg', 'attempt']);
    assert.deepEqual([entry.level, entry.app, entry.msg, entry.attempt], ['warn', 'x', 'redis unavailable', 2]);
    assert.equal(new Date(entry.time).toISOString(), entry.time);
    assert.ok(lines[0].endsWith('}\n'));
    assert.equal(lines[0].indexOf('\n'), lines[0].length - 1);
  });

  it('drops the lines under its level (info by default) and writes those at or above it', () => {
    const info = capture();
    for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const) info.log[level](level);
    assert.deepEqual(info.entries().map((entry) => entry.level), ['info', 'warn', 'error', 'fatal']);
    const trace = capture('trace');
    trace.log.trace('t');
    trace.log.debug('d');
    assert.deepEqual(trace.entries().map((entry) => entry.level), ['trace', 'debug']);
  });

  it('parses OUTBOX_LOG_LEVEL: the six levels in any case, info when unset, anything else refused naming the variable', () => {
    assert.equal(parseLogLevel(undefined, 'OUTBOX_LOG_LEVEL'), 'info');
    assert.equal(parseLogLevel('', 'OUTBOX_LOG_LEVEL'), 'info');
    assert.equal(parseLogLevel('DEBUG', 'OUTBOX_LOG_LEVEL'), 'debug');
    assert.equal(parseLogLevel('fatal', 'OUTBOX_LOG_LEVEL'), 'fatal');
    for (const bad of ['verbose', '30', 'info,debug']) {
      assert.throws(() => parseLogLevel(bad, 'OUTBOX_LOG_LEVEL'), {
        message: `OUTBOX_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, got ${JSON.stringify(bad)}`,
      });
    }
  });

  it('writes an error as one line (code: message) at info, and adds its stack only at debug', () => {
    const error = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1\nsecond line'), { code: 'ECONNREFUSED' });
    const info = capture('info');
    info.log.error('failed', { error, stack: error.stack });
    const [atInfo] = info.entries();
    assert.equal(atInfo.error, 'ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:1 second line');
    assert.equal(atInfo.stack, undefined);
    assert.doesNotMatch(info.lines[0], /\\n\s*at /);
    const debug = capture('debug');
    debug.log.error('failed', { error });
    assert.match(debug.entries()[0].errorStack, /^Error: connect ECONNREFUSED[^]*\n\s+at /);
  });

  it('never writes the password of a Redis URL: in URLs at any depth, password keys, options objects, messages', () => {
    // Not registered with addLogSecret: only URL parsing and key names hide it.
    const password = 'Unregistered-Pass%word';
    const url = `rediss://user:${encodeURIComponent(password)}@redis.example:6380/0`;
    const { log, lines, entries } = capture('trace');
    log.info(`connecting to ${url}`, {
      url,
      nested: { deeper: { target: { url }, list: [url, { password }] } },
      password,
      options: { host: 'redis.example', port: 6380, password, username: 'user' },
      errors: [new Error(`cannot connect to ${url}`)],
      link: new URL(url),
    });
    log.debug('an ioredis options object', { redisOptions: { password, sentinelPassword: password } });
    for (const line of lines) assert.ok(!line.includes(password) && !line.includes(encodeURIComponent(password)), line);
    const [entry, options] = entries();
    const redacted = 'rediss://user:***@redis.example:6380/0';
    assert.equal(entry.msg, `connecting to ${redacted}`);
    assert.equal(entry.url, redacted);
    assert.equal(entry.nested.deeper.target.url, redacted);
    assert.deepEqual(entry.nested.deeper.list, [redacted, { password: '***' }]);
    assert.equal(entry.password, '***');
    assert.deepEqual(entry.options, { host: 'redis.example', port: 6380, password: '***', username: 'user' });
    assert.deepEqual(entry.errors, [`cannot connect to ${redacted}`]);
    assert.equal(entry.link, redacted);
    assert.deepEqual(options.redisOptions, { password: '***', sentinelPassword: '***' });
  });

  it('never writes a password the Redis connection code registered, wherever it turns up in plain text (an ioredis error message)', () => {
    const password = 'S3cret-registered';
    addLogSecret(password);
    const { log, lines, entries } = capture('debug');
    const replyError = Object.assign(new Error(`ERR invalid password ${password}`), { command: { name: 'auth', args: [password] } });
    log.error(`auth failed with ${password}`, { error: replyError, note: `the password is ${password}`, args: [password] });
    for (const line of lines) assert.ok(!line.includes(password), line);
    const [entry] = entries();
    assert.equal(entry.msg, 'auth failed with ***');
    assert.equal(entry.error, 'ERR invalid password ***');
    assert.deepEqual(entry.args, ['***']);
  });
});

describe('apps log JSON lines only', () => {
  const h = useHarness();

  // An invalid OUTBOX_LOG_LEVEL is refused like any setting: test/config.test.ts.

  it('what libraries print themselves (ioredis without an error listener, console.error, process warnings) becomes JSON lines', async () => {
    const app = startApp(h.env, 'dist/test/fixtures/stray-output.js', [], { DEAD_REDIS_URL: 'redis://:pw-of-a-dead-redis@127.0.0.1:1' });
    let stderr = '';
    app.child.stderr!.on('data', (chunk) => (stderr += chunk));
    assert.equal((await app.exited).code, 0);
    assert.equal(stderr, '');
    assert.ok(!app.output().includes('pw-of-a-dead-redis'));
    const entries = app.output().trimEnd().split('\n').map((line) => JSON.parse(line));
    assert.deepEqual(
      entries.map((entry) => [entry.level, entry.msg]),
      [
        ['error', 'Error: a library printing an error'],
        // Node emits warnings on the next tick.
        ['warn', 'a warning Node would print on stderr'],
        ['error', '[ioredis] Unhandled error event: Error: connect ECONNREFUSED 127.0.0.1:1'],
        ['info', 'done'],
      ],
    );
  });

  it('batch relayed is a debug line: written with OUTBOX_LOG_LEVEL=debug', async () => {
    const relay = startApp(h.env, RELAY, FAST, { OUTBOX_LOG_LEVEL: 'debug' });
    try {
      await h.cli('place-order', '--count', '3');
      await waitFor(() => /"level":"debug",[^\n]*"msg":"batch relayed"/.test(relay.output()), { message: 'no debug "batch relayed" line' });
    } finally {
      await stopApp(relay);
    }
  });

  describe('a relay and a consumer whose Redis (with a password) is stopped under them', () => {
    const password = 'pw-never-logged-7Q';
    let server: RedisServer;
    before(async () => {
      server = await RedisServer.start();
      const admin = new Redis(server.url);
      await admin.config('SET', 'requirepass', password);
      admin.disconnect();
    });
    after(() => server.destroy());

    it('write only JSON lines, on stdout, none with the password, no stack at info, no batch relayed at info', async () => {
      const url = `redis://:${password}@127.0.0.1:${server.port}`;
      const stderr = { relay: '', consumer: '' };
      const relay = startApp(h.env, RELAY, FAST, { REDIS_URL: url });
      const consumer = startApp(h.env, CONSUMER, [], { REDIS_URL: url, OUTBOX_LOG_LEVEL: 'debug' });
      relay.child.stderr!.on('data', (chunk) => (stderr.relay += chunk));
      consumer.child.stderr!.on('data', (chunk) => (stderr.consumer += chunk));
      try {
        await waitFor(() => /"msg":"relay started"/.test(relay.output()) && /"msg":"consumer started"/.test(consumer.output()));
        await h.cli('place-order', '--count', '20');
        await waitFor(() => count(h.env.dir, "SELECT COUNT(*) FROM outbox WHERE status = 'PENDING'") === 0, { message: 'the orders were not relayed' });
        await server.stop();
        await waitFor(() => /"msg":"redis connection lost, reconnecting"/.test(relay.output()), { message: 'the relay did not notice' });
        await waitFor(() => /"msg":"cannot take from the queue, retrying"/.test(consumer.output()), { message: 'the consumer did not notice' });
      } finally {
        // Stopped while Redis is still down: their shutdown must not print anything else either.
        await Promise.all([stopApp(relay), stopApp(consumer)]);
      }
      assert.deepEqual(stderr, { relay: '', consumer: '' });
      for (const [app, name] of [[relay, 'outbox-relay'], [consumer, 'outbox-consumer']] as const) {
        const lines = app.output().trimEnd().split('\n');
        for (const line of lines) {
          let entry;
          assert.doesNotThrow(() => (entry = JSON.parse(line)), `not a JSON line: ${line}`);
          assert.equal(entry!.app, name, line);
          assert.ok(!line.includes(password), line);
          if (name === 'outbox-relay') assert.doesNotMatch(line, /\\n\s+at |"stack"|"msg":"batch relayed"/, line);
        }
      }
    });
  });
});
