import type { CommandModule } from 'yargs';
import * as bench from './bench.js';
import * as cancelOrder from './cancel-order.js';
import * as chaos from './chaos.js';
import * as changeQty from './change-qty.js';
import * as consume from './consume.js';
import * as deadLetter from './dead-letter.js';
import * as dualwrite from './dualwrite.js';
import * as dupCheck from './dup-check.js';
import * as init from './init.js';
import * as lab from './lab.js';
import * as orderCheck from './order-check.js';
import * as parked from './parked.js';
import * as placeOrder from './place-order.js';
import * as prune from './prune.js';
import * as redis from './redis.js';
import * as relay from './relay.js';
import * as relayCrash from './relay-crash.js';
import * as replay from './replay.js';
import * as report from './report.js';
import * as status from './status.js';
import * as verify from './verify.js';

/**
 * In the order of the seed's steps, as `outbox --help` lists them.
 *
 * Every command module is loaded at start-up, so at top level a command imports only what defines
 * and checks its options; code that loads ioredis or better-sqlite3 (the stores, through
 * ../stores.ts, or a module such as shared/lab.ts) is imported when the handler runs. That keeps
 * `outbox --help` and a rejected argument fast; test/cli.test.ts fails if one of them loads a store
 * library, bullmq, piscina or pm2.
 */
export const commands = [
  init,
  dualwrite,
  placeOrder,
  changeQty,
  cancelOrder,
  relay,
  orderCheck,
  relayCrash,
  dupCheck,
  consume,
  report,
  verify,
  status,
  replay,
  deadLetter,
  parked,
  prune,
  chaos,
  bench,
  lab,
  redis,
] as unknown as CommandModule[];
