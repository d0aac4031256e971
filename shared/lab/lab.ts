import type { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
import { writeArtifact } from './artifacts.js';
import { checkOrder, formatOrderCheck } from './checks/order-check.js';
import { findDuplicates, formatDuplicates } from './checks/dup-check.js';
import { formatChecks, verifyStores } from '../operations/verify/verify.js';
import { labVerifyChecks } from './checks/verify-checks.js';
import type { VerifyCheckSet } from '../outbox/verify/verify-checks.js';
import type { OutboxConfig } from '../outbox/config.js';
import { createConsumer } from '../outbox/consumer/create-consumer.js';
import { handlers } from './orders/order-handlers.js';
import { dualWrite } from './dualwrite.js';
import { clearProjectKeys } from '../outbox/redis/project-keys.js';
import { keys } from '../outbox/redis/keys.js';
import { formatReport } from './report.js';
import type { LabStore } from './lab-store.js';

export interface LabIo {
  log: (line: string) => void;
  /** Runs `outbox relay-crash` in a child process, which dies at the crash point. */
  runRelayCrash: () => Promise<void>;
}

/**
 * Runs steps 1-8 of the seed on a clean state and shows every artifact, on `store` (app.db or the
 * PostgreSQL store; see lab-store.ts). Resolves true when all checks held. Closes `store`.
 */
export async function runLab(config: OutboxConfig, store: LabStore, redis: Redis, io: LabIo): Promise<boolean> {
  const { dir } = config;
  const step = (title: string) => io.log(`\n== ${title}`);
  const show = (name: string) => {
    for (const line of readFileSync(`${dir}/${name}`, 'utf8').trimEnd().split('\n')) io.log(`   ${name} | ${line}`);
  };

  try {
    step(`1. init --force: fresh ${store.fresh}, this project's Redis keys cleared`);
    // The new database first, then the keys: see `outbox init --force`.
    const created = await store.recreate();
    io.log(`   created ${created}; deleted ${await clearProjectKeys(redis)} Redis keys`);

    step('2. dualwrite: save the order, then publish it as a second write (the bug)');
    writeArtifact(dir, 'dualwrite.out', (await dualWrite(store.scratch(), redis, config.redisUrl)).lines);
    show('dualwrite.out');

    const orders = await store.orders();
    step('3. place-order x3: order row and outbox row in ONE transaction');
    for (const order of [{ sku: 'SKU-A', qty: 2 }, { sku: 'SKU-B', qty: 1 }, { sku: 'SKU-A', qty: 5 }]) {
      const { order: placed, eventId } = await orders.placeOrder(order);
      io.log(`   order ${placed.id}: ${placed.sku} x${placed.qty}, event ${eventId}`);
    }
    const counts = await store.counts(redis);
    io.log(`   orders=${counts.orders} outbox=${counts.outbox}`);
    io.log('   then the lifecycle that makes order matter: change-qty --id 1 --qty 3, cancel-order --id 2');
    await orders.changeQty(1, 3);
    await orders.cancelOrder(2);

    step('4. relay: PENDING rows -> outbox.events, marked PUBLISHED; a second run adds nothing');
    const relay = store.relay(redis);
    const first = await relay.relayAll();
    const afterFirst = await redis.llen(keys.events);
    const second = await relay.relayAll();
    io.log(`   first run relayed ${first.events}, LLEN outbox.events = ${afterFirst}`);
    io.log(`   second run relayed ${second.events}, LLEN outbox.events = ${await redis.llen(keys.events)}`);

    step('5. order-check: per aggregate, events enter the queue in ascending seq');
    const order = await checkOrder(redis);
    writeArtifact(dir, 'order_check.out', formatOrderCheck(order));
    show('order_check.out');

    step('6. relay-crash: push, then die before marking; the normal relay pushes again');
    const { order: fourth } = await orders.placeOrder({ sku: 'SKU-C', qty: 4 });
    io.log(`   placed order ${fourth.id}`);
    await io.runRelayCrash();
    await store.crashedRelayGone();
    const again = await relay.relayAll();
    io.log(`   relay after the crash pushed ${again.events} event(s) again`);
    const dups = await findDuplicates(redis);
    writeArtifact(dir, 'atleastonce.out', formatDuplicates(dups.duplicates));
    show('atleastonce.out');

    step('7. consume: LMOVE to a processing list, SET NX + effect + HSET processed + ack in one script');
    const stats = await (await createConsumer({ redis, handlers, consumerId: 'cli' })).drain();
    io.log(`   received ${stats.received}: applied ${stats.applied}, duplicates skipped ${stats.duplicates}, parked ${stats.parked}, dead-lettered ${stats.dead}`);
    io.log(`   HLEN processed = ${await redis.hlen(keys.processed)}, unique events = ${(await store.counts(redis)).outbox}`);

    step('8. report');
    writeArtifact(dir, 'report.txt', formatReport(await store.counts(redis)));
    show('report.txt');

    step('verify: reconcile the two stores');
    const { checks } = await verifyStores(store.verifyReads(), redis, { checks: labVerifyChecks as VerifyCheckSet<any> });
    for (const line of formatChecks(checks)) io.log(`   ${line}`);
    return order.violations.length === 0 && dups.duplicates.length > 0 && checks.every((c) => c.status !== 'FAIL');
  } finally {
    store.close();
  }
}
