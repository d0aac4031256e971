/** What the consumer wraps a message in when it sets it aside: the dead-letter list and the parked hash. */
export interface Envelope {
  reason: string;
  message: string;
  /** When it was set aside (`deadAt` or `parkedAt`), ms since epoch; 0 when missing. */
  at: number;
}

/** Reads an envelope the consumer wrote; undefined when `stored` is not one (not JSON, no message). */
export function readEnvelope(stored: string): Envelope | undefined {
  try {
    const parsed = JSON.parse(stored) as Record<string, unknown> | null;
    if (parsed && typeof parsed.message === 'string') {
      return { reason: String(parsed.reason ?? ''), message: parsed.message, at: Number(parsed.deadAt ?? parsed.parkedAt ?? 0) };
    }
  } catch {
    // not JSON
  }
  return undefined;
}
