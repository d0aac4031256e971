import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { OTHER_VARIABLES } from '../shared/tooling/docs/config-reference.js';
import { REFERENCE_PAGES, writeReferences } from '../shared/tooling/docs/references.js';
import { DOCS_ROOT as ROOT, proseOf, readPage } from './helpers/docs.js';

/**
 * docs/reference/ is generated from the code (`npm run docs`: the CLI's yargs definitions, the
 * settings modules, the library's TSDoc through typedoc). Regenerated here into a temp dir, every
 * page must equal the committed one: a changed option, default or doc comment fails until the
 * pages are regenerated and committed. About 10 s, most of it typedoc reading the declarations.
 */
describe('generated references', { timeout: 120_000 }, () => {
  it('are current: "npm run docs" leaves no diff', async () => {
    const out = mkdtempSync(join(tmpdir(), 'outbox-reference-docs-'));
    try {
      await writeReferences(ROOT, out);
      const stale = REFERENCE_PAGES.filter((page) => readFileSync(join(out, page), 'utf8') !== readPage(page));
      assert.deepEqual(stale, [], 'generated pages differ from the committed ones: run "npm run docs" and commit docs/reference/');
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('are the only pages of docs/reference/', () => {
    const present = readdirSync(join(ROOT, 'docs', 'reference')).map((name) => `docs/reference/${name}`).sort();
    assert.deepEqual(present, [...REFERENCE_PAGES].sort(), 'docs/reference/ holds generated pages only');
  });

  it('are linked from the README', () => {
    const readme = readPage('README.md');
    for (const page of REFERENCE_PAGES) assert.ok(readme.includes(`](${page})`), `README.md does not link ${page}`);
  });

  it('have no relative link to a file that does not exist', () => {
    const broken: string[] = [];
    for (const page of REFERENCE_PAGES) {
      for (const match of proseOf(page).matchAll(/\]\(([^()\s]+)\)/g)) {
        const target = match[1];
        if (/^[a-z]+:/.test(target) || target.startsWith('#')) continue;
        if (!existsSync(join(ROOT, dirname(page), target.split('#')[0]))) broken.push(`${page}: (${target})`);
      }
    }
    assert.deepEqual(broken, [], 'links to nothing');
  });

  it('name each variable read outside the settings modules as its file reads it, with its default', () => {
    for (const variable of OTHER_VARIABLES) {
      assert.ok(readPage(variable.file).includes(variable.source), `${variable.file} no longer reads ${variable.env} as ${variable.source}: update OTHER_VARIABLES (shared/tooling/docs/config-reference.ts)`);
    }
  });
});
