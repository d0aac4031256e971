--[[
  Counts a failed handler attempt at an event that sits in a consumer's processing list. Below the
  limit the message stays there, waiting for its next attempt (so a crash loses nothing and the
  count survives); at the limit it is dead-lettered with the reason and its count cleared.
  Idempotent for a message already gone: nothing is counted.

  Input:
    KEYS[1] processing list holding the message
    KEYS[2] attempts hash (event_id -> failed attempts)
    KEYS[3] dead-letter list
    KEYS[4] stats hash

    ARGV[1] raw message, exactly as it sits in the processing list
    ARGV[2] event_id
    ARGV[3] attempts allowed (a whole number >= 1)
    ARGV[4] the handler's error
    ARGV[5] now, ms since epoch

  Output: { status, attempts }
    { 'retry', n }  n failed attempts so far (n < allowed): the message stays in the processing list
    { 'dead', n }   n = allowed: dead-lettered as "handler failed <n> times: <error>", count cleared
    { 'stale', 0 }  the message was not in the processing list: nothing done
]]
local allowed = tonumber(ARGV[3])
if not allowed or allowed < 1 or allowed ~= math.floor(allowed) then
  return redis.error_reply('handler-failed: attempts allowed must be a whole number >= 1')
end
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  return { 'stale', 0 }
end
local attempts = redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('HINCRBY', KEYS[4], 'handlerFailures', 1)
if attempts < allowed then
  return { 'retry', attempts }
end
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[2])
local reason = 'handler failed ' .. attempts .. ' times: ' .. ARGV[4]
redis.call('RPUSH', KEYS[3], cjson.encode({ reason = reason, message = ARGV[1], deadAt = tonumber(ARGV[5]) }))
redis.call('HINCRBY', KEYS[4], 'dead', 1)
return { 'dead', attempts }
