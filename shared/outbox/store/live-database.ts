import { existsSync } from 'node:fs';
import { databasePath } from '../config.js';
import { identityOf, same } from './file-identity.js';
import { StoreUnavailableError } from '../errors/store-unavailable-error.js';
import type { Logger } from '../logger.js';
import { openDatabase, type Db, type OpenDatabaseOptions } from './open-database.js';

/**
 * An open app.db that knows which file it opened. SQLite keeps writing into a file that was
 * deleted or replaced (`rm app.db*; outbox init`) and every commit succeeds, but nobody will ever
 * read it again: `isLive()` tells, with one stat, whether the path still names the opened file.
 */
export interface LiveDatabase {
  readonly db: Db;
  readonly path: string;
  /** False once `<dir>/app.db` is missing or is another file (st_dev + st_ino) than the one opened. */
  isLive(): boolean;
  /** For an async pass (relay, prune): the handle is not closed under it. Returns the release. */
  hold(): () => void;
  /** Closes the handle now, or when the last hold is released. */
  close(): void;
}



/** Opens `<dir>/app.db` like `openDatabase` (same errors) and remembers the file it opened. */
export function openLiveDatabase(dir: string, options: OpenDatabaseOptions = {}): LiveDatabase {
  const path = databasePath(dir);
  const before = identityOf(path);
  const db = openDatabase(dir, options);
  const identity = identityOf(path);
  if (!same(before, identity)) {
    db.close();
    throw new StoreUnavailableError(`${path} was replaced while it was being opened: it is opened again at the next check`);
  }
  let holds = 0;
  let closing = false;
  const closeIfFree = () => {
    if (closing && holds === 0 && db.open) db.close();
  };
  return {
    db,
    path,
    isLive: () => same(identity, identityOf(path)),
    hold() {
      holds += 1;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        holds -= 1;
        closeIfFree();
      };
    },
    close() {
      closing = true;
      closeIfFree();
    },
  };
}

export interface DatabaseWatchOptions extends OpenDatabaseOptions {
  log: Logger;
  /** Who uses the database and what stops without it, for the log: e.g. `producer`, `refusing writes`. */
  app: string;
  stopped: string;
  /** How often to check the file, and to look for a valid one while there is none (ms). Default 1000. */
  pollMs?: number;
}

/** The database of a long-running app: opened when valid, dropped when deleted or replaced, reopened when back. */
export interface DatabaseWatch {
  /** The live database; a `StoreUnavailableError` saying why when there is none. */
  current(): LiveDatabase;
  /**
   * Checks now (one stat) that the current database is still the file at the path. When it is not,
   * it is dropped (logged once) and the watch waits for a valid app.db; false while there is none.
   */
  check(): boolean;
  /** Why there is no live database, or undefined when there is one. */
  reason(): string | undefined;
  close(): void;
}

/**
 * Never creates app.db (that is `outbox init`'s job): while it is missing or not valid, the app
 * logs why once and polls. The old handle is closed only once a new file was opened, and not
 * under a pass that holds it.
 */
export function watchDatabase(dir: string, { log, app, stopped, pollMs = 1000, outboxOnly }: DatabaseWatchOptions): DatabaseWatch {
  const path = databasePath(dir);
  const lostMessage = `app.db was deleted or replaced under the ${app}: ${stopped} until a valid app.db is back at ${path} (run "outbox init")`;
  let live: LiveDatabase | undefined;
  let retired: LiveDatabase | undefined;
  let why: string | undefined;
  let lost = false;

  function tryOpen(): void {
    try {
      const opened = openLiveDatabase(dir, { outboxOnly });
      retired?.close();
      retired = undefined;
      if (lost) log.info(`a valid app.db is back: the ${app} resumes on it`, { db: path });
      live = opened;
      why = undefined;
      lost = false;
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      // After a loss, while the file is missing, the lost line already said what to do.
      const message = lost && !existsSync(path) ? lostMessage : error.message;
      if (message !== why) log.error(message, { db: path });
      why = message;
    }
  }

  function check(): boolean {
    if (!live) return false;
    if (live.isLive()) return true;
    log.error(lostMessage, { db: path });
    retired = live;
    live = undefined;
    why = lostMessage;
    lost = true;
    return false;
  }

  tryOpen();
  const timer = setInterval(() => (live ? check() : tryOpen()), pollMs);
  timer.unref();

  return {
    current() {
      if (!live) throw new StoreUnavailableError(why ?? `no database at ${path}`);
      return live;
    },
    check,
    reason: () => why,
    close() {
      clearInterval(timer);
      live?.close();
      retired?.close();
    },
  };
}
