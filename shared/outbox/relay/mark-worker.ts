// The relay's mark thread (mark-thread.ts starts it): its own connection to app.db, on which it
// marks the batches the relay's thread sends, one at a time, in the order sent. SQLite's waits
// (a busy timeout) block this thread, not the relay's event loop.
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import { crashNow } from '../crash-point.js';
import { configure } from '../store/open-database.js';
import { storeIdOf } from '../store/store-meta.js';
import { createMarkPublished } from './mark-published.js';
import type { MarkThreadData, MarkThreadReply, MarkThreadRequest } from './mark-thread.js';

const { path, busyTimeoutMs } = workerData as MarkThreadData;
const port = parentPort!;
const reply = (message: MarkThreadReply) => port.postMessage(message);
const errorOf = (error: unknown) => ({ message: (error as Error)?.message ?? String(error), code: (error as { code?: unknown })?.code as string | undefined });

let mark: ReturnType<typeof createMarkPublished> | undefined;
let db: Database.Database | undefined;
try {
  db = configure(new Database(path, { fileMustExist: true }));
  db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  mark = createMarkPublished(db);
  reply({ kind: 'ready', storeId: storeIdOf(db) });
} catch (error) {
  reply({ kind: 'ready', error: errorOf(error) });
}

port.on('message', (request: MarkThreadRequest) => {
  if (request.kind === 'close') {
    db?.close();
    port.close();
    return;
  }
  try {
    const marked = mark!(request, () => {
      if (request.crashMidBatch !== undefined) crashNow('relay.mid-batch', () => request.crashMidBatch!);
    });
    reply({ kind: 'marked', id: request.id, marked });
  } catch (error) {
    reply({ kind: 'marked', id: request.id, error: errorOf(error) });
  }
});
