import type { OutboxEvent } from '../store/events.js';
import { MalformedMessageError, parseMessage } from '../store/parse-message.js';

/**
 * A queue entry's text, or null when its bytes are not valid UTF-8. Such an entry must be acked by
 * its bytes: LREM with its decoded text (replacement characters) would never match it.
 */
export function decodeEntry(bytes: Buffer): string | null {
  const text = bytes.toString('utf8');
  return text.includes('\uFFFD') && !Buffer.from(text, 'utf8').equals(bytes) ? null : text;
}

/**
 * A queue entry read: its event (with its text, and its bytes as taken), or why it cannot be handled
 * (it is dead-lettered with that reason).
 */
export type ReadEntry = { raw: string; bytes: Buffer; event: OutboxEvent } | { raw: string | Buffer; reason: string };

/** Decodes and parses one queue entry; a bad one is named, never thrown. */
export function readEntry(entry: Buffer): ReadEntry {
  const raw = decodeEntry(entry);
  if (raw === null) return { raw: entry, reason: 'not UTF-8 text' };
  try {
    return { raw, bytes: entry, event: parseMessage(raw) };
  } catch (error) {
    if (!(error instanceof MalformedMessageError)) throw error;
    return { raw, reason: error.message };
  }
}
