--[[
  Moves up to ARGV[1] messages from the head of the event queue to the tail of a consumer's
  processing list, and returns them: the same as that many LMOVE calls, in one round trip, and in
  three commands (LRANGE, LTRIM, RPUSH) rather than one LMOVE per message. Records the processing
  list in the set of processing lists on every call, moved or not (a consumer takes with this
  script before it waits with BLMOVE): the reclaim of a dead consumer's list reads that set, not
  the keyspace, whose dedupe markers grow with the traffic.

  Input:
    KEYS[1] event queue
    KEYS[2] processing list
    KEYS[3] the set of processing lists

    ARGV[1] how many at most
    ARGV[2] the processing list's name as the set records it (without the connection's key prefix)

  Output:
    the messages moved, in order (empty when the queue is empty)
]]
local count = tonumber(ARGV[1])
if not count then return redis.error_reply('move-to-processing: ARGV[1] must be a number') end
count = math.floor(count)
if type(ARGV[2]) ~= 'string' or ARGV[2] == '' then return redis.error_reply('move-to-processing: ARGV[2] must be the processing list name') end
-- Every key's type is checked before the first write, as LMOVE and SADD would (an error here moves nothing).
redis.call('LLEN', KEYS[2])
redis.call('SCARD', KEYS[3])
local moved = count >= 1 and redis.call('LRANGE', KEYS[1], 0, count - 1) or {}
redis.call('SADD', KEYS[3], ARGV[2])
if #moved > 0 then
  redis.call('LTRIM', KEYS[1], #moved, -1)
  -- RPUSH takes them in slices: Lua's stack limits unpack.
  for first = 1, #moved, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(moved, first, math.min(first + 999, #moved)))
  end
end
return moved
