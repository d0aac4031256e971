import { heldCommand } from './held-command.js';

export const { command, describe, builder, handler } = heldCommand(
  'parked',
  'events waiting for a missing earlier seq (outbox.events:parked)',
  'the "<aggregate>:<seq>" shown by "list" (repeatable)',
  'put back at the head of outbox.events',
);
