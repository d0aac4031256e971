// Copies the non-TypeScript files the compiled code loads at run time (the Lua scripts) into dist/.
import { cpSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function copyLua(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) copyLua(path);
    else if (entry.name.endsWith('.lua')) cpSync(path, join(root, 'dist', relative(root, path)));
  }
}

copyLua(join(root, 'shared'));
