import { existsSync } from 'node:fs';
import type { Partitions } from '../../shared/outbox/redis/partitions.js';
import type { Db } from '../../shared/outbox/store/open-database.js';
import type { ConsumerDbStore } from '../../shared/operations/recovery/consumer-db.js';
import type { RecoveryStore } from '../../shared/operations/recovery/repair.js';
import { StoreUnavailableError } from '../../shared/outbox/errors/store-unavailable-error.js';
import { guard, withMore, SHOWN, type GuardArgs } from './confirm.js';

/** `--consumer-db`: the file, opened read-only for the checks; `missing` with --repair when there is none (its checks then see an empty inbox). */
export interface ConsumerDbArg {
  path: string;
  db: Db;
  missing: boolean;
}

/**
 * Database mode: the consumer's file, opened read-only (never created) for the inbox checks and
 * the check set. A missing one is refused, except with --repair, which rebuilds it from the store:
 * until then its checks see an empty inbox.
 */
export async function openConsumerDb(path: string, repair: boolean): Promise<ConsumerDbArg> {
  // Loaded here, not at the top: --help loads every command and must not load better-sqlite3.
  const { default: Database } = await import('better-sqlite3');
  if (!existsSync(path)) {
    if (!repair) {
      throw new StoreUnavailableError(
        `no consumer database at ${path} (--consumer-db): if the database-mode consumer's file was lost, stop the consumers and rebuild it from the store with "outbox verify --repair --consumer-db ${path}"; otherwise pass the file it writes`,
      );
    }
    const { ensureInbox } = await import('../../shared/outbox/consumer/inbox/consumer-database.js');
    return { path, db: ensureInbox(new Database(':memory:')), missing: true };
  }
  let db: Db;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
    db.prepare('SELECT event_id FROM outbox_inbox');
  } catch (error) {
    throw new StoreUnavailableError(`--consumer-db ${path} is not a consumer database with an inbox (${(error as Error).message}): pass the file the database-mode consumer writes`);
  }
  return { path, db, missing: false };
}

/** Creates the consumer database that was missing (the inbox table only: the consumer's own tables are its handlers'). */
export async function createMissingConsumerDb(consumer: ConsumerDbArg): Promise<void> {
  if (!consumer.missing || existsSync(consumer.path)) return;
  const { createConsumerDatabase } = await import('../../shared/outbox/consumer/inbox/consumer-database.js');
  createConsumerDatabase(consumer.path).close();
  console.log(`repair: created the consumer database ${consumer.path} (its inbox table; the consumer's own tables are made by its app)`);
}

/**
 * `verify --repair --consumer-db`: what the consumer database lacks of what Redis records applied,
 * applied again from the store (shared/operations/recovery/consumer-db.ts), after the guard; the
 * pruned events it lacks named. Resolves 'changed' (it rebuilt), 'named' (only pruned events it
 * lacks, named, or a dry run) or 'nothing'.
 */
export async function repairConsumerDb(
  argv: GuardArgs,
  consumer: ConsumerDbArg,
  redis: Partitions,
  recovery: RecoveryStore,
  store: ConsumerDbStore,
): Promise<'changed' | 'named' | 'nothing'> {
  const { planConsumerDbRebuild, rebuildConsumerDb } = await import('../../shared/operations/recovery/consumer-db.js');
  const plan = await planConsumerDbRebuild(consumer.db, redis, store);
  const { unrecoverable } = plan;
  const cannot =
    unrecoverable.events > 0
      ? `${unrecoverable.events} event(s) the consumer database lacks were pruned from ${recovery.source}: their effects cannot be rebuilt`
      : undefined;
  if (plan.events === 0 && !consumer.missing) {
    if (cannot === undefined) return 'nothing';
    console.log(`repair: ${cannot}:`);
    for (const line of unrecoverable.examples) console.log(`  ${line}`);
    return 'named';
  }
  const go = await guard(argv, {
    command: 'verify --repair',
    change:
      `rebuild the consumer database ${consumer.path}${consumer.missing ? ' (missing: created empty)' : ''} from ${recovery.source}: ` +
      `apply again ${plan.lacking} event(s) Redis records applied that its inbox lacks, of ${plan.aggregates.length} aggregate(s): ` +
      `forget their records in Redis from each aggregate's first such event on (${plan.events} event(s): processed entries, apply counts, dedupe markers; the applied seq lowered to the seq before) ` +
      `and republish them${cannot ? `; ${cannot}` : ''} (stop the consumers first, start them after)`,
    size: plan.events,
    shown: withMore([...plan.firstLacking, ...unrecoverable.examples.slice(0, SHOWN)], plan.lacking + unrecoverable.events),
  });
  if (!go) return 'named';
  await createMissingConsumerDb(consumer);
  const done = await rebuildConsumerDb(redis, recovery, plan);
  console.log(
    `repair: the consumer database lacked ${plan.lacking} event(s) Redis recorded applied: forgot the records of ${done.forgotten} event(s) of ${done.aggregates} aggregate(s) ` +
      `and republished them to outbox.events; (re)start the consumers: they apply them again into ${consumer.path}, then verify again`,
  );
  if (cannot !== undefined) {
    console.log(`repair: ${cannot}:`);
    for (const line of unrecoverable.examples) console.log(`  ${line}`);
  }
  return 'changed';
}
