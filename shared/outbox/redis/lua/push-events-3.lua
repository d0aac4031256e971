--[[
  The relay's one write to Redis: pushes a batch of messages of one store onto the event queue,
  only when this Redis serves that store. A Redis that lost its state (no meta hash) or that serves
  another store gets nothing, so a relay never feeds a consumer state that does not belong to it.

  Input:
    KEYS[1] event queue
    KEYS[2] enqueued counter (messages ever pushed, duplicates included)
    KEYS[3] meta hash; its field 'store' names the store this Redis serves

    ARGV[1] store id of the messages
    ARGV[2] the partition the queue belongs to, "i/P" (see partitions.ts; "0/1" on one Redis without
            partitions): the meta hash's field 'partition' must say the same (absent means "0/1")
    ARGV[3..] the messages, in order

  Output: { status, detail[, pushedAt] }
    { 'ok', n, t }       pushed n messages and raised the counter by n, at t: Redis's clock (TIME, ms
                         since epoch) when the messages reached the queue; the relay records it as
                         the rows' published_at
    { 'unclaimed', '' }  the meta hash names no store (Redis lost its state, or was never used): nothing done
    { 'foreign', id }    this Redis serves store id: nothing done
    { 'layout', i/P }    this partition was claimed as partition i of P, not as ARGV[2] (the relay is
                         configured for another number of partitions): nothing done
]]
local meta = redis.call('HMGET', KEYS[3], 'store', 'partition')
local served = meta[1]
if not served then return { 'unclaimed', '' } end
if served ~= ARGV[1] then return { 'foreign', served } end
local layout = meta[2] or '0/1'
if layout ~= ARGV[2] then return { 'layout', layout } end
local n = #ARGV - 2
if n < 1 then return redis.error_reply('push-events: no message given') end
-- Checked before the first write: Redis does not roll a script back.
local enqueued = redis.call('GET', KEYS[2])
if enqueued and not tonumber(enqueued) then
  return redis.error_reply('push-events: ' .. KEYS[2] .. ' holds a non-number')
end
-- RPUSH takes the messages in slices: Lua's stack limits how many unpack can pass at once.
for first = 3, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 999, #ARGV)))
end
redis.call('INCRBY', KEYS[2], n)
local clock = redis.call('TIME')
return { 'ok', n, string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)) }
