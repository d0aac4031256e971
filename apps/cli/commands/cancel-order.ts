import type { ArgumentsCamelCase, Argv } from 'yargs';
import { createOrderService } from '../../../shared/lab/orders/order-service.js';
import { parseOrderId } from '../../../shared/lab/orders/validate.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withDb, withPgOrders } from '../stores.js';

interface Args extends GlobalArgs {
  id: string;
}

export const command = 'cancel-order';
export const describe = 'cancel an order and append OrderCancelled (next seq), one transaction';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs.option('id', { type: 'string', demandOption: true, describe: 'order id' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const id = parseOrderId(argv.id, '--id');
  const config = configOf(argv);
  const { order, eventId, seq } = onPostgres(config)
    ? await withPgOrders(config, (service) => service.cancelOrder(id))
    : await withDb(config, (db) => createOrderService(db).cancelOrder(id));
  console.log(`order ${order.id} cancelled, event ${eventId} (seq ${seq})`);
}
