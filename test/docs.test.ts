import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { DOCS_ROOT as ROOT, docPages, fencedBlocks, proseOf, readPage } from './helpers/docs.js';

/**
 * The shape of the documentation: a README that is a front page into docs/, pages small enough to
 * read, and links and test names that lead somewhere. The command blocks themselves run in
 * test/readme.test.ts.
 */

const README_MAX_LINES = 300;
const PAGE_MAX_BYTES = 60 * 1024;
/** Dated logs: they name what existed when they were written. */
const LOGS = ['docs/performance-history.md', 'docs/test-suite.md'];

describe('docs', () => {
  it(`keeps the README a front page of at most ${README_MAX_LINES} lines`, () => {
    const lines = readPage('README.md').replace(/\n$/, '').split('\n').length;
    assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines: move content into a page of docs/ and link it`);
  });

  it('keeps every page of docs/ under 60 KB', () => {
    for (const page of docPages().filter((p) => p.startsWith('docs/'))) {
      const bytes = statSync(join(ROOT, page)).size;
      assert.ok(bytes <= PAGE_MAX_BYTES, `${page} is ${bytes} bytes (over ${PAGE_MAX_BYTES}): split it by task`);
    }
  });

  it('links every page of docs/ from the README', () => {
    const readme = proseOf('README.md');
    for (const page of docPages().filter((p) => p.startsWith('docs/'))) {
      assert.ok(readme.includes(`](${page})`), `README.md does not link ${page}: add it to the table of contents`);
    }
  });

  it('has no relative link to a file that does not exist', () => {
    const broken: string[] = [];
    for (const page of docPages()) {
      for (const match of proseOf(page).matchAll(/\]\(([^()\s]+)\)/g)) {
        const target = match[1];
        if (/^[a-z]+:/.test(target) || target.startsWith('#')) continue;
        const path = target.split('#')[0];
        if (!existsSync(join(ROOT, dirname(page), path))) broken.push(`${page}: (${target})`);
      }
    }
    assert.deepEqual(broken, [], 'links to nothing');
  });

  it('names only test files that exist', () => {
    const missing: string[] = [];
    for (const page of docPages().filter((p) => !LOGS.includes(p))) {
      for (const match of readPage(page).matchAll(/\btest\/([\w-]+\.test\.ts)\b/g)) {
        if (!existsSync(join(ROOT, 'test', match[1]))) missing.push(`${page}: test/${match[1]}`);
      }
    }
    assert.deepEqual(missing, [], 'test files named in the docs that do not exist');
  });

  it("keeps the README's test command the one .ci/run runs", () => {
    const heading = readPage('README.md').split('\n').indexOf('## Tests') + 1;
    assert.ok(heading > 0, 'README.md has no "## Tests" section');
    const block = fencedBlocks('README.md').find((b) => b.line > heading);
    assert.ok(block, 'the README\'s "## Tests" section has no command block');
    const command = block.lines[0].split(/\s+#\s/)[0].trim();
    const ci = readFileSync(join(ROOT, '.ci', 'run'), 'utf8').trim().split('\n');
    assert.equal(ci[ci.length - 1].trim(), command, '.ci/run must end with the README\'s test command');
  });
});
