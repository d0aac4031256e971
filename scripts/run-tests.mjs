// Runs the compiled test files with node's test runner. Node 20's `--test` takes no globs, so the
// file list is built here. Extra arguments (e.g. a file name fragment) narrow the run; `--quick`
// runs the core chain only (init and orders, relay, consumer, the CLI with report and verify).
//
// The files run four at a time (OUTBOX_TEST_CONCURRENCY overrides it; they wait on processes and
// timers more than they compute: four keep 2 cores busy without starving each other's timings): each starts its own
// redis-server on a free port and uses its own temp dirs, and nothing touches Redis on 6379. The
// files that run the whole system under pm2 with timed faults and traffic (chaos, payments-chaos,
// system) run first, one at a time with nothing beside them: on 2 cores a second file's load makes
// their timings miss (a chaos run beside bench once pruned nothing). bench runs with the others: a
// smoke run that asserts no timing, it spends most of its 23 s waiting on its end-to-end runs under
// pm2, which alone left a core idle. The longest of the others start first.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CONCURRENCY = Number(process.env.OUTBOX_TEST_CONCURRENCY ?? 4);
const QUICK = ['init-and-orders', 'relay', 'consumer', 'cli'];
const ALONE = ['chaos', 'payments-chaos', 'scale-out-chaos', 'system'];
/**
 * The longest of the others, longest first, as measured on the 2-core test machine four at a time
 * (25-85 s each; the rest take less); the rest follow by name. A long file started late is the
 * group's tail.
 */
const SLOWEST = [
  'partitions-cli', 'partitions-cluster-cli', 'postgres-cli', 'readme', 'scale-out', 'data-faults', 'dedupe-window', 'prune-schedule', 'config', 'health', 'bench', 'cli',
  'relay-lock', 'consumer', 'handler-failures', 'status-memory', 'log-rotation',
  'postgres-lab', 'redis-cluster', 'dashboard-stores', 'recovery', 'managed-redis', 'expected-errors', 'postgres-apps', 'guards', 'package', 'init-and-orders', 'redis-settings',
];

const testDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'test');
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const filters = args.filter((arg) => arg !== '--quick');
const stem = (name) => name.replace(/\.test\.js$/, '');
const rank = (name) => (SLOWEST.includes(stem(name)) ? SLOWEST.indexOf(stem(name)) : SLOWEST.length);
const files = readdirSync(testDir)
  .filter((name) => name.endsWith('.test.js'))
  .filter((name) => !quick || QUICK.includes(stem(name)))
  .filter((name) => filters.length === 0 || filters.some((f) => name.includes(f)))
  .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));

if (files.length === 0) {
  console.error(`no test files match ${filters.join(', ')}`);
  process.exit(2);
}

/**
 * A watchdog per group: a test file whose process cannot exit (a child it started still holding it,
 * say) would otherwise hang the run for ever, and CI with it. OUTBOX_TEST_GROUP_MINUTES overrides it.
 */
const GROUP_MINUTES = Number(process.env.OUTBOX_TEST_GROUP_MINUTES ?? 20);

function runFiles(names, concurrency) {
  if (names.length === 0) return 0;
  const paths = names.map((name) => join(testDir, name));
  const result = spawnSync(process.execPath, ['--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...paths], {
    stdio: 'inherit',
    timeout: GROUP_MINUTES * 60_000,
    killSignal: 'SIGKILL',
  });
  if (result.error?.code === 'ETIMEDOUT') {
    console.error(`run-tests: the files ${names.join(', ')} did not finish within ${GROUP_MINUTES} minutes: stopped (a file that never exits? see the last file named above)`);
    return 1;
  }
  return result.status ?? 1;
}

const alone = runFiles(files.filter((name) => ALONE.includes(stem(name))), 1);
const others = runFiles(files.filter((name) => !ALONE.includes(stem(name))), CONCURRENCY);
process.exit(alone || others);
