// Creates the payments consumer's ledger, the first time only: its own SQLite file with the
// library's inbox table (createConsumerDatabase) and the ledger's tables. The consumer never
// creates it: a ledger that is gone was lost, and `outbox verify --repair --consumer-db` rebuilds
// it from the store instead. Usage (after `npm run build`):
//   node dist/examples/payments/init-ledger.js [ledger.db]
// (default PAYMENTS_LEDGER, else <OUTBOX_DIR>/ledger.db, OUTBOX_DIR defaulting to ~/outbox-payments).
// Exit 0: created; 4: the file exists (nothing changed); 2: bad usage; 5: it cannot be created.
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createConsumerDatabase, OutboxError } from 'outbox';
import { LEDGER_SCHEMA } from './ledger.js';
import { settingsOf } from './app-runtime.js';

const args = process.argv.slice(2);
if (args.length > 1 || args.some((arg) => arg.startsWith('-'))) {
  process.stderr.write('usage: node init-ledger.js [ledger.db]\n');
  process.exit(2);
}
const settings = settingsOf();
const path = resolve(args[0] ?? settings.text('PAYMENTS_LEDGER', join(settings.dir(), 'ledger.db')));
try {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  process.umask(0o077);
  const db = createConsumerDatabase(path);
  db.exec(LEDGER_SCHEMA);
  db.close();
  process.stdout.write(`created ${path}\n`);
} catch (error) {
  process.stderr.write(`init-ledger: ${(error as Error).message}\n`);
  process.exit(error instanceof OutboxError ? error.exitCode : 5);
}
