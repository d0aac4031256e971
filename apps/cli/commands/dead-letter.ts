import { heldCommand } from './held-command.js';

export const { command, describe, builder, handler } = heldCommand(
  'dead-letter',
  'messages the consumer could not read (outbox.events:dead)',
  'the entry index shown by "list", "<partition>:<index>" with partitions (repeatable)',
  'put back at the tail of outbox.events',
);
