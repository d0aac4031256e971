import type { ArgumentsCamelCase, Argv } from 'yargs';
import { parseReplayRange, sqliteRecovery, type RecoveryStore, type ReplayPlan } from '../../../shared/operations/recovery/repair.js';
import { guard, guardOptions, idRange, rowLine, SHOWN, withMore, type GuardArgs } from '../confirm.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withDb, withPg } from '../stores.js';

interface Args extends GlobalArgs, GuardArgs {
  from: string;
  to?: string;
}

export const command = 'replay';
export const describe = 'set a range of PUBLISHED rows back to PENDING so the relay publishes them again';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('from', { type: 'string', demandOption: true, describe: 'first row id, or a time (ISO 8601) of created_at' })
    .option('to', { type: 'string', describe: 'last row id or time (default: the newest)' })
    .options(guardOptions);

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const range = parseReplayRange(argv.from, argv.to);
  const run = async (recovery: RecoveryStore) => {
    const plan = await recovery.planReplay(range, SHOWN);
    // Confirmed: no row beyond the last one shown (on app.db, none published after the plan was made).
    return (await confirmed(argv, plan)) ? recovery.replay(range, plan.lastId ?? 0) : null;
  };
  const config = configOf(argv);
  const count = onPostgres(config)
    ? await withPg(config, async (pool) => run((await import('../../../shared/operations/recovery/pg-repair.js')).pgRecovery(pool)))
    : await withDb(config, (db) => run(sqliteRecovery(db)), { outboxOnly: true });
  if (count === null) return;
  console.log(`${count} row(s) set back to PENDING; the relay (outbox relay, or the outbox-relay app) publishes them again and the consumer skips what it already applied`);
}

/** The plan shown (dry run) or asked about; true to go on. */
function confirmed(argv: ArgumentsCamelCase<Args>, plan: ReplayPlan): Promise<boolean> {
  return guard(argv, {
    command: 'replay',
    change: plan.lastId === null ? 'set no row back to PENDING' : `set ${plan.count} PUBLISHED row(s) (${idRange(plan.firstId!, plan.lastId)}) back to PENDING`,
    size: plan.count,
    shown: withMore(plan.firstRows.map(rowLine), plan.count),
  });
}
