import type { ArgumentsCamelCase } from 'yargs';
import { formatChecks, verifyStores } from '../../../shared/checks/verify.js';
import { CheckFailedError } from '../../../shared/errors/check-failed-error.js';
import { configOf, type GlobalArgs } from '../options.js';
import { withStores } from '../stores.js';

export const command = 'verify';
export const describe = 'reconcile SQLite with what the consumer applied; exit 1 if an invariant fails';

export async function handler(argv: ArgumentsCamelCase<GlobalArgs>): Promise<void> {
  const checks = await withStores(configOf(argv), verifyStores);
  console.log(formatChecks(checks).join('\n'));
  const failed = checks.filter((c) => c.status === 'FAIL').length;
  if (failed > 0) throw new CheckFailedError(`${failed} invariant(s) failed`);
}
