import { heldCommand } from './held-command.js';

export const { command, describe, builder, handler } = heldCommand(
  'parked',
  'events waiting for a missing earlier seq (outbox.events:parked)',
  'the "<aggregate key>:<seq>" (e.g. order:7:2) shown by "list" (repeatable)',
  'put back at the head of outbox.events',
);
