import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';
import { checkSetProblem, type VerifyCheckSet } from '../../outbox/verify/verify-checks.js';

const HOW = "pass a JS module whose default export is defineVerifyChecks({ name, checks }) (from 'outbox')";

/** The first line of an error's message: no stack. */
function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split('\n')[0].trim();
}

/**
 * Loads `--checks <module>`: a JS module path, relative to `cwd`, whose default export is a check
 * set. A missing file, a module that does not load, or a default export that is not a check set is
 * an `InvalidInputError` (exit 2), one line, before any store is opened.
 */
export async function loadCheckSet(path: string, cwd = process.cwd()): Promise<VerifyCheckSet<unknown>> {
  const file = resolve(cwd, path);
  if (!existsSync(file) || !statSync(file).isFile()) throw new InvalidInputError(`--checks ${path}: no such file (${file}): ${HOW}`);
  let loaded: { default?: unknown };
  try {
    loaded = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (error) {
    throw new InvalidInputError(`--checks ${path} cannot be loaded (${firstLine(error)}): ${HOW}`);
  }
  if (loaded.default === undefined) throw new InvalidInputError(`--checks ${path} has no default export: ${HOW}`);
  const problem = checkSetProblem(loaded.default);
  if (problem !== undefined) throw new InvalidInputError(`--checks ${path}: its default export is not a check set (${problem}): ${HOW}`);
  return loaded.default as VerifyCheckSet<unknown>;
}
