import type { ArgumentsCamelCase, Argv } from 'yargs';
import { createOrderService } from '../../../shared/lab/orders/order-service.js';
import { parseOrderId, parseQty } from '../../../shared/lab/orders/validate.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withDb, withPgOrders } from '../stores.js';

interface Args extends GlobalArgs {
  id: string;
  qty: string;
}

export const command = 'change-qty';
export const describe = "change an order's quantity and append OrderQtyChanged (next seq), one transaction";

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('id', { type: 'string', demandOption: true, describe: 'order id' })
    .option('qty', { type: 'string', demandOption: true, describe: 'new quantity, 1 to 1000000' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const id = parseOrderId(argv.id, '--id');
  const qty = parseQty(argv.qty, '--qty');
  const config = configOf(argv);
  const { order, eventId, seq } = onPostgres(config)
    ? await withPgOrders(config, (service) => service.changeQty(id, qty))
    : await withDb(config, (db) => createOrderService(db).changeQty(id, qty));
  console.log(`order ${order.id} now ${order.sku} x${order.qty}, event ${eventId} (seq ${seq})`);
}
