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
    ARGV[3] the outbox row of the last message (the highest row id of the call) as a JSON array
            [row id, event id, aggregate key, seq], or '' (then nothing is recorded): the meta hash
            keeps the highest row ever pushed ('pushedId', 'pushedEvent', 'pushedAggregate',
            'pushedSeq') and the row of the latest call ('latestId', 'latestEvent',
            'latestAggregate', 'latestSeq'), so that a store that went back in time (app.db restored
            from an older backup, a PostgreSQL dump cut while a lower row's transaction was open,
            that row pushed after higher ones) is noticed before it pushes again (store-pairing.ts)
    ARGV[4..] the messages, in order

  Output: { status, detail[, pushedAt] }
    { 'ok', n, t }       pushed n messages and raised the counter by n, at t: Redis's clock (TIME, ms
                         since epoch) when the messages reached the queue; the relay records it as
                         the rows' published_at
    { 'unclaimed', '' }  the meta hash names no store (Redis lost its state, or was never used): nothing done
    { 'foreign', id }    this Redis serves store id: nothing done
    { 'layout', i/P }    this partition was claimed as partition i of P, not as ARGV[2] (the relay is
                         configured for another number of partitions): nothing done
]]
local meta = redis.call('HMGET', KEYS[3], 'store', 'partition', 'pushedId')
local served = meta[1]
if not served then return { 'unclaimed', '' } end
if served ~= ARGV[1] then return { 'foreign', served } end
local layout = meta[2] or '0/1'
if layout ~= ARGV[2] then return { 'layout', layout } end
local n = #ARGV - 3
if n < 1 then return redis.error_reply('push-events: no message given') end
-- Checked before the first write: Redis does not roll a script back.
local last
if ARGV[3] ~= '' then
  local ok, row = pcall(cjson.decode, ARGV[3])
  if not (ok and type(row) == 'table' and type(row[1]) == 'number' and row[1] >= 1 and row[1] == math.floor(row[1])
      and type(row[2]) == 'string' and type(row[3]) == 'string' and type(row[4]) == 'number' and row[4] >= 1) then
    return redis.error_reply('push-events: ARGV[3] must be [row id, event id, aggregate, seq] or empty')
  end
  last = row
end
local enqueued = redis.call('GET', KEYS[2])
if enqueued and not tonumber(enqueued) then
  return redis.error_reply('push-events: ' .. KEYS[2] .. ' holds a non-number')
end
-- RPUSH takes the messages in slices: Lua's stack limits how many unpack can pass at once.
for first = 4, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 999, #ARGV)))
end
redis.call('INCRBY', KEYS[2], n)
if last then
  local id, seq = string.format('%d', last[1]), string.format('%d', last[4])
  -- The highest only upward: a relay that pushes an older batch again (after a crash, a replay) leaves it.
  if not tonumber(meta[3]) or last[1] > tonumber(meta[3]) then
    redis.call('HSET', KEYS[3], 'pushedId', id, 'pushedEvent', last[2], 'pushedAggregate', last[3], 'pushedSeq', seq)
  end
  -- The latest always: on PostgreSQL a row that committed late is pushed after higher ids.
  redis.call('HSET', KEYS[3], 'latestId', id, 'latestEvent', last[2], 'latestAggregate', last[3], 'latestSeq', seq)
end
local clock = redis.call('TIME')
return { 'ok', n, string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)) }
