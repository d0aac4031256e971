--[[
  Drops the records of events applied before the dedupe window: their processed entries, apply
  counts and attempts. Reads the applied log from its head, at most ARGV[2] entries, and stops at
  the first batch applied inside the window. Beyond the window an event's seq guard tells it is a
  duplicate. Idempotent: a re-sent call finds the log already trimmed.

  Input:
    KEYS[1] applied log (list: `t<appliedAt ms>` then `e<event_id>` per applied batch)
    KEYS[2] processed hash
    KEYS[3] apply-count hash
    KEYS[4] attempts hash
    KEYS[5] window hash {windowMs, sweptEvents, sweptThrough}

    ARGV[1] the window, ms (a positive integer)
    ARGV[2] log entries read at most (a positive integer)

  Output: { swept, more }: events whose records went; more 1 when the read limit stopped the call
  before the window did.
]]
local windowMs, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if not windowMs or windowMs < 1 or not limit or limit < 1 then
  return redis.error_reply('sweep-window: ARGV[1] (window, ms) and ARGV[2] (entries) must be positive integers')
end
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('sweep-window', {
  { KEYS[1], 'list' }, { KEYS[2], 'hash' }, { KEYS[3], 'hash' }, { KEYS[4], 'hash' }, { KEYS[5], 'hash' },
}, 'nothing swept')
if wrongType then return wrongType end

local clock = redis.call('TIME')
local cutoff = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) - windowMs
--- @include "includes/log-head.lua"
local entries, consumed, through = readLogHead(KEYS[1], limit, cutoff)
local ids = {}
for _, entry in ipairs(entries) do
  if string.sub(entry, 1, 1) == 'e' then ids[#ids + 1] = string.sub(entry, 2) end
end

for first = 1, #ids, 500 do
  local last = math.min(first + 499, #ids)
  redis.call('HDEL', KEYS[2], unpack(ids, first, last))
  redis.call('HDEL', KEYS[3], unpack(ids, first, last))
  redis.call('HDEL', KEYS[4], unpack(ids, first, last))
end
if consumed > 0 then redis.call('LTRIM', KEYS[1], consumed, -1) end
redis.call('HSET', KEYS[5], 'windowMs', ARGV[1])
if #ids > 0 then redis.call('HINCRBY', KEYS[5], 'sweptEvents', #ids) end
raiseThrough(KEYS[5], 'sweptThrough', through)
return { #ids, consumed == limit and 1 or 0 }
