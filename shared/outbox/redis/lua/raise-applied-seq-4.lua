--[[
  verify --repair's answer to an applied seq Redis lost while it kept the processed entries that
  show the aggregate's events applied: raises the aggregate's applied seq to ARGV[2] when it is
  lower (never lowers it: a consumer may have gone further meanwhile), then moves the event parked
  right after the applied seq, as it is then, back to the head of the event queue (its own parked
  successors follow it as it is applied). Atomic, so a consumer applying meanwhile is never undone;
  idempotent, so a re-sent call does nothing more. Everything is read and checked before the first
  write.

  Input:
    KEYS[1] applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    KEYS[2] parked hash ("<aggregate>:<seq>" -> JSON {reason, message, parkedAt})
    KEYS[3] event queue
    KEYS[4] window hash (its 'guards' counts the seq guards)

    ARGV[1] the aggregate key
    ARGV[2] the seq its processed entries show applied (a positive integer)

  Output:
    { raised, requeued }: raised 1 when the applied seq was lower and is now ARGV[2], else 0;
    requeued 1 when a parked event was moved to the queue, 0 when none was parked there, -1 when its
    entry is not a parked envelope (left where it is, for `outbox parked` and an operator)
]]
--- @include "includes/envelope.lua"
local aggregate, target = ARGV[1], tonumber(ARGV[2])
if type(aggregate) ~= 'string' or aggregate == '' then return redis.error_reply('raise-applied-seq: ARGV[1] must be an aggregate key') end
if not target or target < 1 or target ~= math.floor(target) then return redis.error_reply('raise-applied-seq: ARGV[2] must be a positive integer') end
--- @include "includes/guards.lua"
local stored = readGuards(KEYS[1], { aggregate })[1]
local current = stored and tonumber(stored)
if stored and not current then
  return redis.error_reply('raise-applied-seq: ' .. KEYS[1] .. ' field ' .. aggregate .. ' holds a non-number: fix it by hand')
end
current = current or 0
-- The parked hash is read before the first write (a key of another type fails there); the queue
-- is written only.
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('raise-applied-seq', { { KEYS[3], 'list' } }, 'nothing raised')
if wrongType then return wrongType end
local raised = 0
local seq = current
if current < target then
  seq = target
  raised = 1
end
local field = aggregate .. ':' .. string.format('%d', seq + 1)
local parked = redis.call('HGET', KEYS[2], field)
local message = parked and envelopeMessage(parked)
local requeued = (parked and not message) and -1 or 0
if raised == 1 then writeGuards(KEYS[1], KEYS[4], { aggregate, ARGV[2] }) end
if message then
  redis.call('HDEL', KEYS[2], field)
  redis.call('LPUSH', KEYS[3], message)
  requeued = 1
end
return { raised, requeued }
