/** The aggregate type of the lab's orders: an order's key is `order:<id>`. */
export const ORDER_AGGREGATE = 'order';

/** Hash sku -> reserved quantity: what the lab's handler changes (an effect's key, not the library's). */
export const INVENTORY_KEY = 'inventory:reserved';
