/**
 * A queue entry's text, or null when its bytes are not valid UTF-8. Such an entry must be acked by
 * its bytes: LREM with its decoded text (replacement characters) would never match it.
 */
export function decodeEntry(bytes: Buffer): string | null {
  const text = bytes.toString('utf8');
  return text.includes('\uFFFD') && !Buffer.from(text, 'utf8').equals(bytes) ? null : text;
}
