/** An effect as the apply script reads it: op, key (relative to the namespace), field or member, value. */
export type EncodedEffect = readonly [string, string, string, string];

/**
 * What running the handler of one event gave, as the consumer engine takes it (plain data: it
 * crosses from a worker thread): its effects; an error (this attempt failed: retried after a
 * backoff, dead-lettered after the last attempt); or poison (no attempt can succeed: dead-lettered
 * at once with the reason).
 */
export type HandlerResult = { effects: EncodedEffect[] } | { error: string } | { poison: string };
