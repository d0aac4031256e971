// Runs the compiled test files with node's test runner. Node 20's `--test` takes no globs, so the
// file list is built here. Extra arguments (e.g. a file name fragment) narrow the run; `--quick`
// runs the core chain only (init and orders, relay, consumer, the CLI with report and verify).
//
// Files run TEST_CONCURRENCY at a time (OUTBOX_TEST_CONCURRENCY overrides it). They can: each file
// starts its own redis-server on a free port and uses its own temp dirs, the pm2 files their own
// PM2_HOME and a free HTTP port, and nothing touches Redis on 6379. The files that take longest
// start first, so that no long file is left running alone at the end.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const TEST_CONCURRENCY = Number(process.env.OUTBOX_TEST_CONCURRENCY ?? 2);
const QUICK = ['init-and-orders', 'relay', 'consumer', 'cli'];
/** Slowest first, as measured on the 2-core test machine; the others follow in name order. */
const SLOWEST = ['chaos', 'data-faults', 'system', 'consumer', 'cli'];

const testDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'test');
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const filters = args.filter((arg) => arg !== '--quick');
const rank = (name) => {
  const i = SLOWEST.indexOf(name.replace(/\.test\.js$/, ''));
  return i === -1 ? SLOWEST.length : i;
};
const files = readdirSync(testDir)
  .filter((name) => name.endsWith('.test.js'))
  .filter((name) => !quick || QUICK.includes(name.replace(/\.test\.js$/, '')))
  .filter((name) => filters.length === 0 || filters.some((f) => name.includes(f)))
  .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
  .map((name) => join(testDir, name));

if (files.length === 0) {
  console.error(`no test files match ${filters.join(', ')}`);
  process.exit(2);
}
const result = spawnSync(process.execPath, ['--test', `--test-concurrency=${TEST_CONCURRENCY}`, '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
