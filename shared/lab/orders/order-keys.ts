/** Hash sku -> reserved quantity: what the lab's handler changes (an effect's key, not the library's). */
export const INVENTORY_KEY = 'inventory:reserved';
