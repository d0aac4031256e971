// Runs every compiled test file with node's test runner. Node 20's `--test` takes no globs, so the
// file list is built here; extra arguments (e.g. a file name fragment) narrow the run.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const testDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'test');
const filters = process.argv.slice(2);
const files = readdirSync(testDir)
  .filter((name) => name.endsWith('.test.js'))
  .filter((name) => filters.length === 0 || filters.some((f) => name.includes(f)))
  .sort()
  .map((name) => join(testDir, name));

if (files.length === 0) {
  console.error(`no test files match ${filters.join(', ')}`);
  process.exit(2);
}
const result = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
