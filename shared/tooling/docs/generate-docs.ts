// `npm run docs`: writes docs/reference/ (the CLI, configuration and API references) from the code.
// test/reference-docs.test.ts fails while a committed page differs from what this writes.
import { REPO_ROOT } from '../local/pm2.js';
import { writeReferences } from './references.js';

const started = Date.now();
const pages = await writeReferences(REPO_ROOT, REPO_ROOT);
console.log(`docs: wrote ${pages.join(', ')} in ${((Date.now() - started) / 1000).toFixed(1)}s`);
