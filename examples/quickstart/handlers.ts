// examples/quickstart/handlers.ts: pure handlers that return their Redis effects; the consumer
// applies them once per event, in the same atomic step as its dedupe marker and its ack.
import { defineRedisHandlers, effect } from 'outbox';
import { taskEvents } from './events.js';

export const handlers = defineRedisHandlers(taskEvents, {
  TaskAdded: (e) => [effect.sadd('tasks:open', e.aggregateId), effect.hset('tasks:title', e.aggregateId, e.payload.title)],
  TaskCompleted: (e) => [effect.srem('tasks:open', e.aggregateId), effect.hincrby('tasks:stats', 'completed', 1)],
});
