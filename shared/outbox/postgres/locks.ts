/**
 * Transaction-level advisory lock keys (per database; one bigint key space shared with the user's
 * own advisory locks, so these are fixed, unlikely values: "outbox" in ASCII, then a small tag).
 */
const BASE = 0x6f7574626f780000n;

/** Held while the library's tables are created: concurrent first starts create them once. */
export const INIT_LOCK = String(BASE + 1n);

/**
 * Every relay batch holds it SHARED from claim to commit (relays never wait for each other); a
 * rebuild takes it EXCLUSIVE to set PUBLISHED rows back to PENDING, so it waits for every batch in
 * flight (whose push may have gone to the Redis that lost its state) to commit its mark first, and
 * no batch marks a row after the reset read it.
 */
export const REPLAY_LOCK = String(BASE + 2n);

/** Session-level, held by the one relay that pairs (claims or rebuilds) Redis for the store. */
export const PAIRING_LOCK = String(BASE + 3n);

/**
 * Session-level, held SHARED by every app that has the store open (the relay and producer apps), on
 * a connection of its own: `outbox init --force` refuses while anyone holds it. It goes with the
 * session, so an app killed with SIGKILL (or on another machine) leaves nothing stale behind.
 */
export const ATTACHED_LOCK = String(BASE + 4n);
