// Copies the non-TypeScript files the compiled code loads at run time (the Lua scripts, the
// dashboard page's HTML and CSS) into dist/,
// and makes the CLI's bin executable: tsc writes it 0644, and `npx outbox` in the repository runs
// package.json's bin directly when npm has linked it before (e.g. a cached link of an earlier clone
// at the same path), which fails with "Permission denied" on a file that is not executable.
//
// A file already in place with the same bytes is left alone: `npx outbox` in a new clone installs
// the project as a link and runs its `prepare` (this build) while other programs may be loading
// dist/, and a rewrite would let them read a half-written file. tsc is incremental for the same
// reason: a build with nothing changed writes nothing.
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function copyLua(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) copyLua(path);
    else if (entry.name.endsWith('.lua')) {
      const target = join(root, 'dist', relative(root, path));
      if (existsSync(target) && readFileSync(target).equals(readFileSync(path))) continue;
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(path, target);
    }
  }
}

copyLua(join(root, 'shared'));
// The dashboard page's HTML and CSS (its script is compiled by tsc next to them).
for (const name of ['index.html', 'dashboard.css']) {
  const path = join(root, 'apps', 'dashboard', 'page', name);
  const target = join(root, 'dist', 'apps', 'dashboard', 'page', name);
  if (existsSync(target) && readFileSync(target).equals(readFileSync(path))) continue;
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(path, target);
}
chmodSync(join(root, 'dist', 'apps', 'cli', 'main.js'), 0o755);
