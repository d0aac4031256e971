import type { ArgumentsCamelCase, Argv } from 'yargs';
import { createOrderService, type NewOrder, type OrderWrite } from '../../../shared/lab/orders/order-service.js';
import { parseCount, parseQty, parseSku } from '../../../shared/lab/orders/validate.js';
import { configOf, type GlobalArgs } from '../options.js';
import { onPostgres, withDb, withPgOrders } from '../stores.js';

interface Args extends GlobalArgs {
  sku: string;
  qty: string;
  count: string;
}

export const command = 'place-order';
export const describe = 'insert an order and its OrderPlaced outbox row in one transaction';

export const builder = (yargs: Argv<GlobalArgs>) =>
  yargs
    .option('sku', { type: 'string', default: 'SKU-1', describe: 'product code' })
    .option('qty', { type: 'string', default: '1', describe: 'quantity, 1 to 1000000' })
    .option('count', { type: 'string', default: '1', describe: 'orders to place, each in its own transaction' });

export async function handler(argv: ArgumentsCamelCase<Args>): Promise<void> {
  const order = { sku: parseSku(argv.sku, '--sku'), qty: parseQty(argv.qty, '--qty') };
  const count = parseCount(argv.count, '--count');
  const config = configOf(argv);
  const placeAll = async (placeOrder: (order: NewOrder) => OrderWrite | Promise<OrderWrite>) => {
    for (let i = 0; i < count; i += 1) {
      const { order: placed, eventId } = await placeOrder(order);
      if (count <= 20) console.log(`placed order ${placed.id} (${placed.sku} x${placed.qty}), event ${eventId}`);
    }
    if (count > 20) console.log(`placed ${count} orders (${order.sku} x${order.qty})`);
  };
  if (onPostgres(config)) await withPgOrders(config, (service) => placeAll(service.placeOrder));
  else await withDb(config, (db) => placeAll(createOrderService(db).placeOrder));
}
