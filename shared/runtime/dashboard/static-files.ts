import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { extname, join } from 'node:path';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

export interface StaticFile {
  type: string;
  body: Buffer;
}

/**
 * The page's files, read once at start and served from memory: the page (index.html,
 * dashboard.js, dashboard.css, from `pageDir`) and uPlot from its npm package's dist (no CDN).
 * URL path -> file.
 */
export function loadStaticFiles(pageDir: string): Map<string, StaticFile> {
  const uplotDist = join(createRequire(import.meta.url).resolve('uplot/package.json'), '..', 'dist');
  const files: [string, string][] = [
    ['/', join(pageDir, 'index.html')],
    ['/dashboard.js', join(pageDir, 'dashboard.js')],
    ['/dashboard.css', join(pageDir, 'dashboard.css')],
    ['/vendor/uPlot.iife.min.js', join(uplotDist, 'uPlot.iife.min.js')],
    ['/vendor/uPlot.min.css', join(uplotDist, 'uPlot.min.css')],
  ];
  return new Map(files.map(([path, file]) => [path, { type: TYPES[extname(file)], body: readFileSync(file) }]));
}
