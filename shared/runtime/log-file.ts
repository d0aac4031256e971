import { closeSync, fstatSync, openSync, readdirSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

export interface LogFileOptions {
  /** The current file, e.g. `logs/outbox-relay.log`; rotated ones are `<path>.1` (newest) to `<path>.<retain>`. */
  path: string;
  /** A line that would take the current file past this many bytes goes to a new one. */
  maxBytes: number;
  /** Rotated files kept besides the current one (0: none); older ones are deleted. */
  retain: number;
}

/**
 * An app's own log file, rotated by size: at most `retain` + 1 files, each at most `maxBytes` (or
 * one line, when a line alone is longer), so logs stay bounded without pm2-logrotate. Written
 * synchronously (a line is in the file when `write` returns, also just before an exit).
 *
 * Several processes may share the file (pm2 `instances` > 1 with `merge_logs`): each checks before a
 * write that its descriptor is still the file at `path`, and reopens it when another one rotated it.
 * Two that rotate at the same instant leave a short rotated file and drop the oldest one early, and
 * two that write at once may each add a line past `maxBytes`: the bounds hold but for those lines.
 */
export class RotatingLogFile {
  private fd = -1;
  private ino = -1;

  constructor(private readonly options: LogFileOptions) {
    this.dropBeyondRetain();
  }

  /** Appends `line` (one JSON line with its newline), rotating first when it would not fit. */
  write(line: string): void {
    const current = this.current();
    let size: number;
    if (this.fd >= 0 && current?.ino === this.ino) size = current.size;
    else {
      // First write, a file deleted by hand, or one another process rotated: open what is at `path` now.
      this.reopen();
      size = fstatSync(this.fd).size;
    }
    if (size > 0 && size + Buffer.byteLength(line) > this.options.maxBytes) this.rotate();
    writeSync(this.fd, line);
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    this.ino = -1;
  }

  private current(): { ino: number; size: number } | undefined {
    try {
      const { ino, size } = statSync(this.options.path);
      return { ino, size };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  private reopen(): void {
    this.close();
    // O_APPEND: the lines of several processes (and pm2's, which has the file open too) never overwrite each other.
    this.fd = openSync(this.options.path, 'a', 0o600);
    this.ino = fstatSync(this.fd).ino;
  }

  /** `<path>.<n-1>` to `<path>.<n>`, …, `<path>` to `<path>.1` (a rename replaces what was there), then a new file. */
  private rotate(): void {
    const { path, retain } = this.options;
    for (let n = retain; n >= 1; n -= 1) {
      try {
        renameSync(n === 1 ? path : `${path}.${n - 1}`, `${path}.${n}`);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    if (retain === 0) unlinkIfThere(path);
    this.reopen();
  }

  /** Rotated files past `retain` (left by a run with a larger one) are deleted at start. */
  private dropBeyondRetain(): void {
    const { path, retain } = this.options;
    const prefix = `${basename(path)}.`;
    let names: string[];
    try {
      names = readdirSync(dirname(path));
    } catch {
      return;
    }
    for (const name of names) {
      const rest = name.startsWith(prefix) ? name.slice(prefix.length) : '';
      if (/^\d+$/.test(rest) && Number(rest) > retain) unlinkIfThere(join(dirname(path), name));
    }
  }
}

function unlinkIfThere(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
