import { EXAMPLES, type InvariantCheck, type VerifyCheckSet, type VerifyContext, type VerifyContextOfAnyStore, type VerifyProducer } from '../../outbox/verify/verify-checks.js';
import type { ProducerSnapshot } from './observe.js';

const STATUSES = new Set(['ok', 'FAIL', 'info']);

/** The first line of what a check threw: a message, never a stack. */
function messageOf(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split('\n')[0].trim() || (error instanceof Error ? error.name : 'an empty error');
}

/** A row of a check as verify prints it, or why it is not one. */
function rowProblem(row: unknown): string | undefined {
  if (typeof row !== 'object' || row === null) return `it returned ${row === null ? 'null' : typeof row}, not an InvariantCheck`;
  const r = row as Partial<InvariantCheck>;
  for (const field of ['name', 'expected', 'actual'] as const) {
    if (typeof r[field] !== 'string') return `its row's ${field} is not a string`;
  }
  if (!STATUSES.has(r.status as string)) return `its row's status must be 'ok', 'FAIL' or 'info', got ${JSON.stringify(r.status)}`;
  if (r.examples !== undefined && !(Array.isArray(r.examples) && r.examples.every((e) => typeof e === 'string'))) return "its row's examples are not strings";
  return undefined;
}

/** A failed row standing for a check that threw or returned something verify cannot print. */
function brokenRow(check: string, message: string): InvariantCheck {
  return { name: check, expected: 'a result', actual: `threw: ${message}`, status: 'FAIL' };
}

/**
 * Runs every check of a set, in order. A check that throws (or whose snapshot read threw, or that
 * returns something other than rows) fails its row with the message and is reported to `onError`;
 * the other checks still run.
 */
export async function runCheckSet(
  set: VerifyCheckSet<unknown>,
  context: Omit<VerifyContextOfAnyStore<unknown>, 'snapshot'> & VerifyProducer,
  snapshot: ProducerSnapshot,
  onError: (check: string, message: string) => void = () => {},
): Promise<InvariantCheck[]> {
  const rows: InvariantCheck[] = [];
  const fail = (check: string, message: string) => {
    onError(check, message);
    rows.push(brokenRow(check, message));
  };
  if ('error' in snapshot) {
    fail(`${set.name}: snapshot.${context.store === 'postgres' ? 'postgres' : 'producer'}`, messageOf(snapshot.error));
    return rows;
  }
  for (const [name, check] of Object.entries(set.checks)) {
    let result: unknown;
    try {
      result = await check({ ...context, snapshot: snapshot.value } as VerifyContext<unknown>);
    } catch (error) {
      fail(name, messageOf(error));
      continue;
    }
    const returned = Array.isArray(result) ? result : [result];
    const problem = returned.map(rowProblem).find((p) => p !== undefined);
    if (problem !== undefined) fail(name, problem);
    else rows.push(...(returned as InvariantCheck[]).map((r) => ({ ...r, examples: r.examples?.length ? r.examples.slice(0, EXAMPLES) : undefined })));
  }
  return rows;
}
