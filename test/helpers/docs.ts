import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root, from dist/test/helpers. */
export const DOCS_ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** The README and every page of docs/, as paths relative to the root: README first, then docs/ by name. */
export function docPages(): string[] {
  const docs = readdirSync(join(DOCS_ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

export function readPage(page: string): string {
  return readFileSync(join(DOCS_ROOT, page), 'utf8');
}

export interface FencedBlock {
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The info string after the opening fence ('' for none). */
  lang: string;
  /** The lines between the fences. */
  lines: string[];
  /** The last non-blank line before the fence (e.g. an HTML comment that marks the block). */
  before: string;
}

/** Every ``` block of a page, in order. */
export function fencedBlocks(page: string): FencedBlock[] {
  const lines = readPage(page).split('\n');
  const blocks: FencedBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]);
    if (!open) continue;
    let close = i + 1;
    while (close < lines.length && !lines[close].startsWith('```')) close++;
    let b = i - 1;
    while (b >= 0 && lines[b].trim() === '') b--;
    blocks.push({ page, line: i + 1, lang: open[1], lines: lines.slice(i + 1, close), before: b >= 0 ? lines[b] : '' });
    i = close;
  }
  return blocks;
}

/** The page's text without its fenced blocks and inline code spans: what its links are read from. */
export function proseOf(page: string): string {
  const lines = readPage(page).split('\n');
  const kept: string[] = [];
  let inBlock = false;
  for (const line of lines) {
    if (line.startsWith('```')) {
      inBlock = !inBlock;
      continue;
    }
    if (!inBlock) kept.push(line);
  }
  // A code span may run across a line break.
  return kept.join('\n').replace(/`[^`]*`/g, '');
}
