--[[
  Moves one dead-lettered message back to the tail of the event queue (after the consumer learned
  to handle it). Idempotent: a re-sent call finds the entry gone and does nothing. The entry is
  decoded, and the queue's type checked, before anything is written: a script error after the
  LREM would lose it.

  Input:
    KEYS[1] dead-letter list
    KEYS[2] event queue

    ARGV[1] the dead-letter entry, exactly as stored (JSON {reason, message, deadAt}), as bytes

  Output:
    1 moved, 0 the entry was not there, -1 the entry is not a dead-letter envelope (nothing done)
]]
--- @include "includes/envelope.lua"
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('requeue-dead-letter', { { KEYS[2], 'list' } }, 'nothing moved')
if wrongType then return wrongType end
local message = envelopeMessage(ARGV[1])
if not message then
  return -1
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], message)
return 1
