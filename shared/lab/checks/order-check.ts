import type { Redis } from 'ioredis';
import { MalformedMessageError, parseMessage } from '../../outbox/store/parse-message.js';
import { readList } from '../../outbox/redis/read-list.js';
import { keys } from '../../outbox/redis/keys.js';
import { partitionsOf, type Partitions } from '../../outbox/redis/partitions.js';

export interface OrderViolation {
  /** The aggregate key, e.g. `order:7`. */
  aggregateId: string;
  eventId: string;
  seq: number;
  afterSeq: number;
  /** Position in the queue, 0 = head. */
  index: number;
  /** With partitions: the partition whose queue it is in (`index` is in that queue). */
  partition?: number;
}

export interface OrderCheckResult {
  events: number;
  aggregates: number;
  /** Entries whose envelope is not a valid event's; the consumer will dead-letter them. */
  unreadable: number;
  violations: OrderViolation[];
}

/**
 * Reads `outbox.events` without consuming it and checks that, per aggregate, the first occurrence
 * of each event comes in ascending seq. A later re-delivered duplicate is allowed. With partitions,
 * each partition's queue (an aggregate's events are all in its partition's).
 */
export async function checkOrder(redis: Redis | Partitions): Promise<OrderCheckResult> {
  const partitions = partitionsOf(redis);
  const seen = new Set<string>();
  const lastSeq = new Map<string, number>();
  const result: OrderCheckResult = { events: 0, aggregates: 0, unreadable: 0, violations: [] };
  for (const [partition, client] of partitions.clients.entries()) await checkQueue(client, partitions.count > 1 ? partition : undefined, seen, lastSeq, result);
  result.aggregates = lastSeq.size;
  return result;
}

/** `checkOrder` on one queue. */
async function checkQueue(redis: Redis, partition: number | undefined, seen: Set<string>, lastSeq: Map<string, number>, result: OrderCheckResult): Promise<void> {
  let index = -1;
  for await (const raw of readList(redis, keys.events)) {
    index += 1;
    let event;
    try {
      event = parseMessage(raw);
    } catch (error) {
      if (!(error instanceof MalformedMessageError)) throw error;
      result.unreadable += 1;
      continue;
    }
    result.events += 1;
    if (seen.has(event.eventId)) continue;
    seen.add(event.eventId);
    const afterSeq = lastSeq.get(event.aggregateId) ?? 0;
    if (event.seq <= afterSeq) {
      result.violations.push({ aggregateId: event.aggregateId, eventId: event.eventId, seq: event.seq, afterSeq, index, ...(partition === undefined ? {} : { partition }) });
    } else {
      lastSeq.set(event.aggregateId, event.seq);
    }
  }
}

/** The lines of order_check.out. */
export function formatOrderCheck(result: OrderCheckResult): string[] {
  if (result.violations.length === 0) return ['ORDER OK'];
  return result.violations.map(
    (v) => `ORDER VIOLATION aggregate=${v.aggregateId} seq=${v.seq} after_seq=${v.afterSeq} event_id=${v.eventId} index=${v.index}${v.partition === undefined ? '' : ` partition=${v.partition}`}`,
  );
}
