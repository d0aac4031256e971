/** The events an order emits, in the order its lifecycle allows. */
export const EVENT_TYPES = ['OrderPlaced', 'OrderQtyChanged', 'OrderCancelled'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface OrderPlacedPayload {
  orderId: number;
  sku: string;
  qty: number;
}

export interface OrderQtyChangedPayload {
  orderId: number;
  sku: string;
  qty: number;
  previousQty: number;
}

/** `qty` is the quantity the cancelled order had reserved. */
export type OrderCancelledPayload = OrderPlacedPayload;

export type EventPayload = OrderPlacedPayload | OrderQtyChangedPayload | OrderCancelledPayload;

/** An outbox row as the relay reads it. `payload` is the JSON text stored in SQLite. */
export interface OutboxRow {
  id: number;
  event_id: string;
  aggregate_id: number;
  seq: number;
  event_type: string;
  payload: string;
}

/** A message on `outbox.events`, parsed and checked. */
export interface OutboxEvent {
  eventId: string;
  /** The store (app.db) the event comes from; the consumer applies it only where Redis serves that store. */
  storeId: string;
  aggregateId: number;
  seq: number;
  type: EventType;
  payload: EventPayload;
}

/**
 * The wire form of a row of store `storeId`: the seed's fields, then `store_id`. The stored payload
 * text is embedded as it is (it was written by JSON.stringify), so the relay never parses it.
 */
export function toMessage(row: OutboxRow, storeId: string): string {
  return (
    `{"event_id":${JSON.stringify(row.event_id)},"aggregate_id":${row.aggregate_id},` +
    `"seq":${row.seq},"event_type":${JSON.stringify(row.event_type)},"payload":${row.payload},"store_id":${JSON.stringify(storeId)}}`
  );
}

/** Change in reserved inventory for the event's SKU. */
export function inventoryDelta(event: OutboxEvent): number {
  switch (event.type) {
    case 'OrderPlaced':
      return event.payload.qty;
    case 'OrderQtyChanged':
      return event.payload.qty - (event.payload as OrderQtyChangedPayload).previousQty;
    case 'OrderCancelled':
      return -event.payload.qty;
  }
}

/** The event_id of a queue entry, read without checking the rest; undefined when there is none. */
export function eventIdOf(message: string): string | undefined {
  try {
    const id = (JSON.parse(message) as { event_id?: unknown }).event_id;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}
