import type Database from 'better-sqlite3';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import type { MarkRequest } from './mark-published.js';

export interface MarkThreadData {
  /** app.db's path: the thread opens its own connection to it. */
  path: string;
  /** The relay's connection's busy timeout, ms: the thread's connection waits as long. */
  busyTimeoutMs: number;
}

type SentError = { message: string; code?: string };

export type MarkThreadRequest = ({ kind: 'mark'; id: number; crashMidBatch?: string } & MarkRequest) | { kind: 'close' };

export type MarkThreadReply = { kind: 'ready'; storeId?: string; error?: SentError } | { kind: 'marked'; id: number; marked?: boolean; error?: SentError };

/** A mark thread left without work this long ends; the next long pass starts another. */
const IDLE_MS = 10_000;

export interface MarkThread {
  /** Marks a batch in the thread (batches are marked in the order sent); `crashMidBatch`: the crash point fires there, with this line. */
  mark(request: MarkRequest, crashMidBatch?: string): Promise<boolean>;
  /** Ends the thread (its connection closed), after the marks already sent. */
  close(): void;
  /** False once the thread ended (closed, idle, or failed): the relay starts another when it needs one. */
  readonly alive: boolean;
}

/** An error the thread sent back, as the relay's thread would have thrown it (a SqliteError keeps its code). */
function rebuild({ message, code }: SentError): Error {
  if (typeof code !== 'string' || !code.startsWith('SQLITE_')) return new Error(message);
  // Required here, not imported: the CLI's --help loads this module's importers, and must not load better-sqlite3.
  const { SqliteError } = createRequire(import.meta.url)('better-sqlite3') as typeof Database;
  return new SqliteError(message, code);
}

/**
 * Starts the relay's mark thread on app.db at `path` (mark-worker.ts): the relay reads and pushes
 * the next batch in its own thread while this one marks the last, so a long backlog uses two
 * cores. The thread refuses to mark (every mark rejects) when the file at `path` belongs to another
 * store than `storeId` (replaced since the relay opened it). It does not keep the process alive
 * while idle, and ends after IDLE_MS without work.
 */
export function startMarkThread(data: MarkThreadData, storeId: string): MarkThread {
  const worker = new Worker(new URL('./mark-worker.js', import.meta.url), { workerData: data });
  worker.unref();
  const pending = new Map<number, { resolve: (marked: boolean) => void; reject: (error: Error) => void }>();
  let nextId = 0;
  let alive = true;
  let idle: NodeJS.Timeout | undefined;
  let failure: Error | undefined;

  const ready = new Promise<void>((resolve, reject) => {
    worker.once('message', (reply: MarkThreadReply) => {
      if (reply.kind !== 'ready') return reject(new Error('the relay\'s mark thread did not start'));
      if (reply.error) return reject(rebuild(reply.error));
      if (reply.storeId !== storeId) {
        return reject(new StoreUnavailableError(`${data.path} now holds store ${reply.storeId}, not the relay's ${storeId} (the file was replaced): not marking`));
      }
      worker.on('message', onReply);
      resolve();
    });
  });
  ready.catch((error: Error) => end(error));

  function onReply(reply: MarkThreadReply): void {
    if (reply.kind !== 'marked') return;
    const waiting = pending.get(reply.id);
    pending.delete(reply.id);
    if (reply.error) waiting?.reject(rebuild(reply.error));
    else waiting?.resolve(reply.marked!);
    if (pending.size === 0) {
      worker.unref();
      idle = setTimeout(close, IDLE_MS).unref();
    }
  }

  /** The thread is gone or unusable: every mark waiting fails with `error`. */
  function end(error: Error): void {
    if (!alive) return;
    alive = false;
    failure = error;
    clearTimeout(idle);
    for (const { reject } of pending.values()) reject(error);
    pending.clear();
    void worker.terminate();
  }

  // A thread started ahead (`prepare`) and never used ends too.
  idle = setTimeout(close, IDLE_MS).unref();
  worker.on('error', (error) => end(new Error(`the relay's mark thread failed: ${error.message}`)));
  worker.on('exit', (code) => end(new Error(`the relay's mark thread exited (${code})`)));

  function close(): void {
    if (!alive) return;
    alive = false;
    clearTimeout(idle);
    // After the marks already sent: the thread takes messages in order.
    worker.postMessage({ kind: 'close' } satisfies MarkThreadRequest);
  }

  return {
    async mark(request, crashMidBatch) {
      if (!alive) throw failure ?? new Error("the relay's mark thread was closed");
      clearTimeout(idle);
      const id = nextId++;
      const marked = new Promise<boolean>((resolve, reject) => pending.set(id, { resolve, reject }));
      // Kept alive while a mark is outstanding: the relay awaits it.
      worker.ref();
      worker.postMessage({ kind: 'mark', id, crashMidBatch, ...request } satisfies MarkThreadRequest);
      // Both awaited together: when the thread fails to start, `marked` rejects too, and is handled.
      const [, result] = await Promise.all([ready, marked]);
      return result;
    },
    close,
    get alive() {
      return alive;
    },
  };
}
