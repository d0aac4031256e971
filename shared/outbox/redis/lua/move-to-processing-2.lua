--[[
  Moves up to ARGV[1] messages from the head of the event queue to the tail of a consumer's
  processing list, and returns them: the same as that many LMOVE calls, in one round trip, and in
  three commands (LRANGE, LTRIM, RPUSH) rather than one LMOVE per message.

  Input:
    KEYS[1] event queue
    KEYS[2] processing list

    ARGV[1] how many at most

  Output:
    the messages moved, in order (empty when the queue is empty)
]]
local count = tonumber(ARGV[1])
if not count then return redis.error_reply('move-to-processing: ARGV[1] must be a number') end
count = math.floor(count)
if count < 1 then return {} end
-- Both keys' types are checked before the first write, as LMOVE would (an error here moves nothing).
redis.call('LLEN', KEYS[2])
local moved = redis.call('LRANGE', KEYS[1], 0, count - 1)
if #moved > 0 then
  redis.call('LTRIM', KEYS[1], #moved, -1)
  -- RPUSH takes them in slices: Lua's stack limits unpack.
  for first = 1, #moved, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(moved, first, math.min(first + 999, #moved)))
  end
end
return moved
