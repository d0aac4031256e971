--[[
  The consumers that share partitions: each one says it is alive, and reads who else is. The set is
  kept in partition 0 (one key, one slot). Times are Redis's clock (TIME), so the consumers'
  clocks do not matter.

  Input:
    KEYS[1] members (sorted set: owner -> ms since epoch until which it counts as alive)

    ARGV[1] 'join' (this owner is alive for ARGV[2] ms more) or 'leave' (it stopped)
    ARGV[2] ms it counts as alive (a whole number > 0)
    ARGV[3] the owner: consumer id and a token of this run of the process

  Output: the owners alive now (the caller sorts them by name: the order every consumer assigns partitions by).
]]
local op, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if (op ~= 'join' and op ~= 'leave') or not ttl or ttl < 1 or not owner or owner == '' then
  return redis.error_reply('consumer-members: ARGV must be join|leave, a TTL in ms and an owner')
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if op == 'join' then
  redis.call('ZADD', KEYS[1], now + ttl, owner)
  redis.call('PEXPIRE', KEYS[1], ttl * 10)
else
  redis.call('ZREM', KEYS[1], owner)
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
