/**
 * Secrets that no log line may carry, whatever field or message they turn up in (an ioredis error,
 * an options object, a URL someone built by hand). Kept apart from the logger so that the Redis
 * connection code can register a password without loading pino.
 */
const secrets = new Set<string>();

/** Shorter secrets are not scrubbed as substrings (a one-letter password would blank every such letter); URLs still are. */
const MIN_SCRUBBED_LENGTH = 4;

/** Remembers `secret` (and its percent-decoded form) so that the logger replaces it with `***`. */
export function addLogSecret(secret: string | undefined): void {
  if (!secret) return;
  for (const form of [secret, safeDecode(secret)]) {
    if (form.length >= MIN_SCRUBBED_LENGTH) secrets.add(form);
  }
}

/** Remembers the password of a Redis URL, if it has one. */
export function addUrlSecret(url: string | undefined): void {
  if (!url) return;
  try {
    addLogSecret(new URL(url).password);
  } catch {
    // Not a URL: config validation says so; nothing to remember.
  }
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** `user:password@` in any URL inside `text`, e.g. `redis://:pw@host` inside an error message. */
const URL_CREDENTIALS = /([a-z][a-z0-9+.-]*:\/\/[^\s:@/"'<>]*:)[^\s/"'<>]+@/gi;

/** `text` with the passwords of URLs and every remembered secret replaced by `***`. */
export function scrubSecrets(text: string): string {
  let out = text.includes('://') ? text.replace(URL_CREDENTIALS, '$1***@') : text;
  for (const secret of secrets) {
    if (out.includes(secret)) out = out.split(secret).join('***');
  }
  return out;
}

// The apps and the CLI read REDIS_URL: its password is known from the first line on.
addUrlSecret(process.env.REDIS_URL);
