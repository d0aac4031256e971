#!/usr/bin/env node
import { createRequire } from 'node:module';
import { explainError } from '../../shared/outbox/errors/explain-error.js';
import { keepFilesPrivate } from '../../shared/runtime/private-files.js';
import { cliFor } from './cli.js';

const require = createRequire(import.meta.url);
const { hideBin } = require('yargs/helpers') as typeof import('yargs/helpers');

async function main(argv: string[]): Promise<void> {
  await (await cliFor(argv)).parseAsync();
}

keepFilesPrivate();
try {
  await main(hideBin(process.argv));
} catch (error) {
  const expected = explainError(error);
  if (expected) {
    console.error(`outbox: ${expected.message}`);
    process.exitCode = expected.exitCode;
  } else {
    console.error(error);
    process.exitCode = 1;
  }
}
