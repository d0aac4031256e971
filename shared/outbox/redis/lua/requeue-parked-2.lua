--[[
  Moves one parked event back to the head of the event queue, to be tried again at once.
  Idempotent: a re-sent call finds the field gone and does nothing. The entry is decoded, and the
  queue's type checked, before anything is written: a script error after the HDEL would lose it.

  Input:
    KEYS[1] parked hash
    KEYS[2] event queue

    ARGV[1] the parked field, "<aggregate_id>:<seq>"

  Output:
    1 moved, 0 the field was not there, -1 its value is not a parked envelope (nothing done)
]]
--- @include "includes/envelope.lua"
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('requeue-parked', { { KEYS[2], 'list' } }, 'nothing moved')
if wrongType then return wrongType end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then
  return 0
end
local message = envelopeMessage(stored)
if not message then
  return -1
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[2], message)
return 1
