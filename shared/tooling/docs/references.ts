import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { apiReference } from './api-reference.js';
import { cliReference } from './cli-reference.js';
import { configReference } from './config-reference.js';

/** The generated pages, relative to the repository's root. */
export const REFERENCE_PAGES = ['docs/reference/cli.md', 'docs/reference/configuration.md', 'docs/reference/api.md'] as const;

/** Every generated page's text, by path (`REFERENCE_PAGES`), built from the code of `root` (its dist/ for the API). */
export async function renderReferences(root: string): Promise<Record<(typeof REFERENCE_PAGES)[number], string>> {
  return {
    'docs/reference/cli.md': await cliReference(),
    'docs/reference/configuration.md': configReference(),
    'docs/reference/api.md': await apiReference(root),
  };
}

/** Writes the generated pages under `outDir` (the repository's root for `npm run docs`, a temp dir for the test). */
export async function writeReferences(root: string, outDir: string): Promise<string[]> {
  const pages = await renderReferences(root);
  for (const [page, text] of Object.entries(pages)) {
    mkdirSync(dirname(join(outDir, page)), { recursive: true });
    writeFileSync(join(outDir, page), text);
  }
  return Object.keys(pages);
}
