// examples/quickstart/events.ts: the events of a to-do service, declared once with their payloads.
import { z } from 'zod';
import { defineEvents } from 'outbox';

export const taskEvents = defineEvents({
  TaskAdded: { aggregate: 'task', payload: z.object({ title: z.string().min(1).max(200) }) },
  TaskCompleted: { aggregate: 'task', payload: z.object({}) },
});
