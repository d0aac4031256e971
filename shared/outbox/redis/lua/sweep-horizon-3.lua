--[[
  Drops the seq guard of each aggregate idle for longer than the aggregate horizon: one whose guard
  still holds the seq an entry older than the horizon logged, so nothing of it was applied since.
  Reads the aggregate log from its head, at most ARGV[2] entries, and stops at the first batch
  applied inside the horizon. Idempotent: a re-sent call finds the log already trimmed.

  Input:
    KEYS[1] aggregate log (list: `t<appliedAt ms>` then `a<seq> <aggregate>` per applied batch)
    KEYS[2] applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    KEYS[3] window hash: 'droppedThrough' (the apply time the drops reached), 'droppedGuards'

    ARGV[1] the horizon, ms (a positive integer)
    ARGV[2] log entries read at most (a positive integer)

  Output: { dropped, more }: guards dropped; more 1 when the read limit stopped the call before the
  horizon did.
]]
local horizonMs, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if not horizonMs or horizonMs < 1 or not limit or limit < 1 then
  return redis.error_reply('sweep-horizon: ARGV[1] (horizon, ms) and ARGV[2] (entries) must be positive integers')
end
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('sweep-horizon', { { KEYS[1], 'list' }, { KEYS[3], 'hash' } }, 'nothing dropped')
if wrongType then return wrongType end

local clock = redis.call('TIME')
local cutoff = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) - horizonMs
--- @include "includes/log-head.lua"
local entries, consumed, through = readLogHead(KEYS[1], limit, cutoff)
local aggregates, seqs = {}, {}
for _, entry in ipairs(entries) do
  local space = string.sub(entry, 1, 1) == 'a' and string.find(entry, ' ', 2, true)
  if space then
    seqs[#seqs + 1] = string.sub(entry, 2, space - 1)
    aggregates[#aggregates + 1] = string.sub(entry, space + 1)
  end
end

--- @include "includes/guards.lua"
local dropped = {}
local current = readGuards(KEYS[2], aggregates)
for k = 1, #aggregates do
  if current[k] == seqs[k] then dropped[#dropped + 1] = aggregates[k] end
end
dropGuards(KEYS[2], KEYS[3], dropped)
if consumed > 0 then redis.call('LTRIM', KEYS[1], consumed, -1) end
if #dropped > 0 then redis.call('HINCRBY', KEYS[3], 'droppedGuards', #dropped) end
raiseThrough(KEYS[3], 'droppedThrough', through)
return { #dropped, consumed == limit and 1 or 0 }
