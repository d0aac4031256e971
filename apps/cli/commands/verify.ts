import type { ArgumentsCamelCase, Argv } from 'yargs';
import type { Partitions } from '../../../shared/outbox/redis/partitions.js';
import { formatDuration, parseDuration } from '../../../shared/outbox/duration.js';
import { formatChecks, verifyStores, type Ledger } from '../../../shared/operations/verify/verify.js';
import { verifyReadsOf } from '../../../shared/operations/verify/observe.js';
import type { Db } from '../../../shared/outbox/store/open-database.js';
import { inboxChecks } from '../../../shared/operations/verify/inbox-checks.js';
import { CheckFailedError } from '../../../shared/outbox/errors/check-failed-error.js';
import { describeRebuild, sqliteRecovery, type RecoveryStore } from '../../../shared/operations/recovery/repair.js';
import type { ConsumerDbStore } from '../../../shared/operations/recovery/consumer-db.js';
import { createMissingConsumerDb, openConsumerDb, repairConsumerDb, type ConsumerDbArg } from '../consumer-db-repair.js';
import { guard, guardOptions, idRange, SHOWN, rowLine, withMore, type GuardArgs, type Plan } from '../confirm.js';
import { configOf, type GlobalArgs } from '../options.js';
import { loadCheckSet } from '../../../shared/operations/verify/load-check-set.js';
import { checkSetStoreProblem, type VerifyCheckSet } from '../../../shared/outbox/verify/verify-checks.js';
import { onPostgres, withPgPartitionStores, withPartitionStores } from '../stores.js';
import { InvalidInputError } from '../../../shared/outbox/errors/invalid-input-error.js';
import type { OutboxConfig } from '../../../shared/outbox/config.js';

interface Args extends GlobalArgs, GuardArgs {
  repair: boolean;
  settle: string;
  consumerDb?: string;
  checks?: string;
}

export const command = 'verify';
export const describe = 'reconcile the outbox store (app.db or PostgreSQL) with what the consumer applied; exit 1 if an invariant fails';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('repair', {
      type: 'boolean',
      default: false,
      describe: 'republish exactly the events found lost (never applied and nowhere in Redis); give aggregates whose pruned events Redis lost their pruned seq; rebuild from the store a Redis that lost its state, or that the store is behind (restored from an older backup)',
    })
    .option('settle', {
      type: 'string',
      default: '5s',
      requiresArg: true,
      describe: 'how long to wait for events in flight at the snapshot before judging (a unit is required; 0s: judge the snapshot as it is)',
    })
    .option('consumer-db', {
      type: 'string',
      requiresArg: true,
      describe:
        "database mode: the consumer's own SQLite file; check that every processed event has its inbox row there (and not the Redis inventory, which database mode does not write); " +
        'with --repair, rebuild it from the store when it was lost or replaced (the events its inbox lacks applied again)',
    })
    .option('checks', {
      type: 'string',
      requiresArg: true,
      describe: "a JS module (path relative to the current directory) whose default export is your domain's check set (defineVerifyChecks); default: the orders lab's checks when the database has its orders table",
    })
    .options(guardOptions);

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const settleMs = parseDuration(argv.settle, '--settle');
  // A bad module is refused before any store is opened.
  const userChecks = argv.checks === undefined ? undefined : await loadCheckSet(argv.checks);
  const config = configOf(argv);
  if (userChecks !== undefined) {
    const problem = checkSetStoreProblem(userChecks, onPostgres(config) ? 'postgres' : 'sqlite');
    if (problem !== undefined) throw new InvalidInputError(`--checks ${argv.checks}: ${problem}: add one to verify this store`);
  }
  await withVerifyStores(config, userChecks, async ({ store, redis, checkSet, recovery, consumerDbStore }) => {
    const consumer = argv.consumerDb === undefined ? undefined : await openConsumerDb(argv.consumerDb, argv.repair);
    try {
      await judge(store, redis, argv, settleMs, checkSet, consumer, recovery, consumerDbStore);
    } finally {
      consumer?.db.close();
    }
  });
}

/** What verify judges: the store's reads, the partitions, the check set, and the store's recovery for --repair. */
interface VerifyStores {
  store: Parameters<typeof verifyStores>[0];
  redis: Partitions;
  checkSet: VerifyCheckSet<any> | undefined;
  recovery: RecoveryStore;
  /** What `--repair --consumer-db` reads of the store. */
  consumerDbStore: ConsumerDbStore;
}

/**
 * Opens the stores verify judges, app.db or PostgreSQL (then S1 is read in one REPEATABLE READ
 * transaction, pg-verify-reads.ts), across the partitions, with the check set: `userChecks`, else the
 * lab's when the database has the lab's orders table. The library's tables are what verify needs: a
 * service's database (no lab `orders`) verifies too.
 */
async function withVerifyStores<T>(config: OutboxConfig, userChecks: VerifyCheckSet<unknown> | undefined, fn: (stores: VerifyStores) => Promise<T>): Promise<T> {
  if (onPostgres(config)) {
    const { pgVerifyReads } = await import('../../../shared/operations/verify/pg-verify-reads.js');
    const { pgRecovery } = await import('../../../shared/operations/recovery/pg-repair.js');
    const { pgConsumerDbStore } = await import('../../../shared/operations/recovery/consumer-db.js');
    const { isLabPgDatabase, labVerifyChecks } = await import('../../../shared/lab/checks/verify-checks.js');
    return withPgPartitionStores(config, async (pool, redis) => {
      const checkSet = userChecks ?? ((await isLabPgDatabase(pool)) ? (labVerifyChecks as VerifyCheckSet<any>) : undefined);
      return fn({ store: pgVerifyReads(pool), redis, checkSet, recovery: pgRecovery(pool), consumerDbStore: pgConsumerDbStore(pool) });
    });
  }
  const { sqliteConsumerDbStore } = await import('../../../shared/operations/recovery/consumer-db.js');
  return withPartitionStores(
    config,
    async (db, redis) => fn({ store: db, redis, checkSet: userChecks ?? (await labChecksFor(db)), recovery: sqliteRecovery(db), consumerDbStore: sqliteConsumerDbStore(db) }),
    {},
    { outboxOnly: true },
  );
}

/**
 * `outbox verify --settle <settleMs>`'s table, judged in this process with the same stores and
 * check set, and how many rows failed: for a caller that only wants the verdict on the stores (a
 * test's last look after its subject), without a CLI process.
 */
export function verifyTable(config: OutboxConfig, settleMs: number): Promise<{ table: string; failed: number }> {
  return withVerifyStores(config, undefined, async ({ store, redis, checkSet }) => {
    const { checks } = await verifyStores(store, redis, { settleMs, checks: checkSet });
    return { table: formatChecks(checks).join('\n'), failed: checks.filter((c) => c.status === 'FAIL').length };
  });
}

/**
 * The part of verify both stores share: judge the snapshot with the check set, add the inbox checks
 * of database mode, print the table, repair when asked (after the guard), and fail on a FAIL row.
 */
async function judge(
  store: Parameters<typeof verifyStores>[0],
  redis: Partitions,
  argv: ArgumentsCamelCase<Args>,
  settleMs: number,
  checkSet: VerifyCheckSet<any> | undefined,
  consumer: ConsumerDbArg | undefined,
  recovery: RecoveryStore,
  consumerDbStore: ConsumerDbStore,
): Promise<void> {
  const consumerDb = consumer?.db;
  const ledger = await verifyStores(store, redis, {
    settleMs,
    checks: checkSet,
    consumer: consumerDb,
    onSettling: (inFlight, windowMs) =>
      console.error(`verify: ${inFlight} event(s) in flight at the snapshot; waiting up to ${formatDuration(windowMs)} for them to be applied`),
    onCheckError: (check, message) => console.error(`verify: check "${check}" of ${checkSet!.name} threw: ${message}`),
  });
  const { checks, lost, figures } = ledger;
  if (consumerDb) checks.push(...(await inboxChecks(consumerDb, redis, verifyReadsOf(store))));
  console.log(formatChecks(checks).join('\n'));
  // Database mode, a consumer database lost or replaced: what its inbox lacks is applied again
  // (a rebuild of Redis below delivers every event again anyway, and the inbox decides).
  const rebuilding = figures.ahead.length > 0 || figures.redisStateLost;
  const consumerRepaired = argv.repair && consumer && !rebuilding ? await repairConsumerDb(argv, consumer, redis, recovery, consumerDbStore) : 'nothing';
  if (argv.repair && figures.ahead.length > 0) {
    const partitionsAheadOf = await aheadPartitions(redis, figures.ahead);
    if (await guard(argv, await resetPlan(recovery, partitionsAheadOf, consumerDb !== undefined))) {
      await reset(recovery, redis, partitionsAheadOf);
      if (consumer) await createMissingConsumerDb(consumer);
      return;
    }
  } else if (argv.repair && (figures.redisStateLost || lost.length > 0 || figures.prunedBehind.length > 0 || figures.seqBehind.length > 0 || figures.releasable.length > 0)) {
    if (await guard(argv, await repairPlan(recovery, ledger, await lostPartitions(redis)))) {
      await repair(recovery, redis, ledger);
      if (consumer && rebuilding) await createMissingConsumerDb(consumer);
      return;
    }
  } else if (argv.repair && consumerRepaired === 'changed') {
    return;
  } else if (argv.repair && consumerRepaired === 'nothing') {
    console.log('repair: no event is lost, nothing to republish');
  }
  const failed = checks.filter((c) => c.status === 'FAIL').length;
  if (failed > 0) throw new CheckFailedError(`${failed} invariant(s) failed`);
}

/** The lab's check set when the database is the lab's (has `orders`); none for a service's own database. */
async function labChecksFor(db: Db): Promise<VerifyCheckSet<any> | undefined> {
  // Loaded here, not at the top: --help loads every command and must not load the lab (zod).
  const { isLabDatabase, labVerifyChecks } = await import('../../../shared/lab/checks/verify-checks.js');
  return isLabDatabase(db) ? labVerifyChecks : undefined;
}

/** What `--repair` would change: the rows a rebuild sets back to PENDING, or the lost events' rows. */
async function repairPlan(recovery: RecoveryStore, { lost, figures }: Ledger, lostIn: LostPartitions): Promise<Plan> {
  if (figures.redisStateLost) {
    const { count, firstId, lastId, firstRows } = await recovery.publishedRows(SHOWN, lostIn.inLost);
    return {
      command: 'verify --repair',
      change:
        `rebuild Redis, which lost its state${lostIn.which}, from ${recovery.source}: set ${count} PUBLISHED row(s) (${idRange(firstId, lastId)}) back to PENDING, ` +
        'delete the consumer state left in Redis and relay every PENDING row',
      size: count,
      shown: withMore(firstRows.map(rowLine), count),
    };
  }
  const rows = await recovery.rowsOfEvents(lost, SHOWN);
  const behind = figures.prunedBehind;
  const seqBehind = figures.seqBehind;
  const changes = [
    ...(lost.length > 0 ? [`republish ${lost.length} lost event(s): set their rows back to PENDING and relay every PENDING row`] : []),
    ...(behind.length > 0
      ? [`give ${behind.length} aggregate(s) whose pruned events Redis lost their pruned seq (their effects cannot be rebuilt: counted as unrecoverable) and queue the event parked after them again`]
      : []),
    ...(seqBehind.length > 0
      ? [`raise the applied seq of ${seqBehind.length} aggregate(s) that Redis lost to the last seq their processed entries show applied (nothing is applied again) and queue the event parked after it again`]
      : []),
    ...(figures.releasable.length > 0 ? [`queue again ${figures.releasable.length} parked event(s) whose aggregate's applied seq has reached the seq before them`] : []),
  ];
  const size = lost.length + behind.length + seqBehind.length + figures.releasable.length;
  return {
    command: 'verify --repair',
    change: changes.join('; '),
    size,
    shown: withMore(
      [
        ...rows.map(rowLine),
        ...behind.slice(0, SHOWN).map((p) => `${p.aggregate} seq ${p.fromSeq}-${p.throughSeq} (pruned)`),
        ...seqBehind.slice(0, SHOWN).map((a) => `${a.aggregate} applied seq ${a.appliedSeq} -> ${a.throughSeq}`),
        ...figures.releasable.slice(0, SHOWN).map((field) => `${field} (parked)`),
      ],
      size,
    ),
  };
}

/** Republishes the lost events or, when Redis lost its state, rebuilds every effect from the store, as the relay does on its own. */
async function repair(recovery: RecoveryStore, redis: Partitions, { lost, figures }: Ledger): Promise<void> {
  if (figures.redisStateLost) return rebuild(recovery, redis);
  if (figures.prunedBehind.length > 0) {
    const { restorePrunedSeqs } = await import('../../../shared/operations/recovery/pruned-seqs.js');
    const done = await restorePrunedSeqs(redis, figures.prunedBehind);
    console.log(`repair: ${done.aggregates} aggregate(s) given their pruned seq (${done.events} pruned event(s) whose effects Redis lost, counted as unrecoverable); ${done.requeued} parked event(s) queued again`);
  }
  const appliedSeqs = figures.seqBehind.length > 0 || figures.releasable.length > 0 ? await import('../../../shared/operations/recovery/applied-seqs.js') : undefined;
  if (appliedSeqs && figures.seqBehind.length > 0) {
    const done = await appliedSeqs.raiseAppliedSeqs(redis, figures.seqBehind);
    console.log(`repair: ${done.aggregates} aggregate(s) given back the applied seq their processed entries show; ${done.requeued} parked event(s) queued again`);
  }
  if (appliedSeqs && figures.releasable.length > 0) {
    const requeued = await appliedSeqs.requeueReleasable(redis, figures.releasable);
    console.log(`repair: ${requeued} parked event(s) whose aggregate's applied seq had reached the seq before them queued again`);
  }
  if (lost.length === 0) return;
  const { reset } = await recovery.republish(redis, lost);
  console.log(`repair: republished ${reset} lost event(s) to outbox.events; once the consumer has applied them, verify again`);
}

/** Rebuilds the partitions that serve no store from the store, as the relay does on its own. */
async function rebuild(recovery: RecoveryStore, redis: Partitions): Promise<void> {
  const { events } = await recovery.rebuild(redis, (pairing) => console.log(`repair: ${describeRebuild(recovery, pairing)}`));
  console.log(`repair: relayed ${events} event(s) to outbox.events; once the consumer has applied them, verify again`);
}

/** The partitions a store is behind: " (partition 1)" for the plan, their indexes, and a filter of their aggregates (none when all are). */
interface AheadPartitions extends LostPartitions {
  indexes: number[];
}

async function aheadPartitions(partitions: Partitions, indexes: number[]): Promise<AheadPartitions> {
  if (partitions.count === 1) return { which: '', indexes };
  const { partitionOf } = await import('../../../shared/outbox/redis/partitions.js');
  const which = ` (partition${indexes.length > 1 ? 's' : ''} ${indexes.join(', ')})`;
  if (indexes.length === partitions.count) return { which, indexes };
  const set = new Set(indexes);
  return { which, indexes, inLost: (aggregate) => set.has(partitionOf(aggregate, partitions.count)) };
}

/** What `--repair` does to a Redis the store is behind: clear it, then rebuild it as one that lost its state. */
async function resetPlan(recovery: RecoveryStore, ahead: AheadPartitions, databaseMode: boolean): Promise<Plan> {
  const { count, firstId, lastId, firstRows } = await recovery.publishedRows(SHOWN, ahead.inLost);
  const pruned = await recovery.prunedEvents(ahead.inLost);
  const prunedLoss =
    pruned.events > 0
      ? `; the effects of ${pruned.events} event(s) of ${pruned.aggregates} aggregate(s) pruned from ${recovery.source} go with them and cannot be rebuilt (verify names them)`
      : '';
  return {
    command: 'verify --repair',
    change:
      `delete this project's keys in Redis${ahead.which}, whose state follows events ${recovery.source} no longer holds (queue, processing lists, dead letters, ` +
      `consumer state and the effects it recorded), and rebuild it from ${recovery.source}: set ${count} PUBLISHED row(s) (${idRange(firstId, lastId)}) back to PENDING ` +
      `and relay every PENDING row${prunedLoss}` +
      (databaseMode ? '; the consumer database (--consumer-db) is not changed: restore it first from a backup taken with the store\'s, or its effects of the lost events stay' : ''),
    size: count,
    shown: withMore(firstRows.map(rowLine), count),
  };
}

async function reset(recovery: RecoveryStore, redis: Partitions, ahead: AheadPartitions): Promise<void> {
  const { clearProjectKeys } = await import('../../../shared/outbox/redis/project-keys.js');
  let deleted = 0;
  for (const index of ahead.indexes) deleted += await clearProjectKeys(redis.clients[index]);
  console.log(`repair: deleted ${deleted} Redis key(s) of this project${ahead.which}`);
  await rebuild(recovery, redis);
}

/** The partitions that lost their state (serve no store): " (partition 1)" for the plan, and a filter of their aggregates; none with one partition or all lost. */
interface LostPartitions {
  which: string;
  inLost?: (aggregate: string) => boolean;
}

async function lostPartitions(partitions: Partitions): Promise<LostPartitions> {
  if (partitions.count === 1) return { which: '' };
  const { keys } = await import('../../../shared/outbox/redis/keys.js');
  const { partitionOf } = await import('../../../shared/outbox/redis/partitions.js');
  const served = await Promise.all(partitions.clients.map((redis) => redis.hget(keys.meta, 'store')));
  const lost = served.flatMap((store, index) => (store === null ? [index] : []));
  const which = ` (partition${lost.length > 1 ? 's' : ''} ${lost.join(', ')})`;
  if (lost.length === partitions.count) return { which };
  const set = new Set(lost);
  return { which, inLost: (aggregate) => set.has(partitionOf(aggregate, partitions.count)) };
}
