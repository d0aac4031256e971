--[[
  Moves seq guards from the hash of the layout before buckets (the applied-seq key itself) into
  their buckets (includes/guards.lua), at most ARGV[1] per call. A guard already in its bucket keeps
  the higher seq. Idempotent and safe beside consumers: each move is atomic, and the scripts read
  the old hash wherever a bucket lacks a guard.

  Input:
    KEYS[1] applied-seq key: the old layout's hash, and the buckets' base name
    KEYS[2] window hash (its 'guards' counts the guards in buckets)

    ARGV[1] guards moved at most (a positive integer)

  Output: { moved, more }: more 1 while the old hash still holds guards.
]]
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return redis.error_reply('migrate-guards: ARGV[1] must be a positive integer') end
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('migrate-guards', { { KEYS[1], 'hash' }, { KEYS[2], 'hash' } }, 'nothing moved')
if wrongType then return wrongType end
--- @include "includes/guards.lua"

local aggregates, seqs = {}, {}
local cursor = '0'
repeat
  local reply = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', limit)
  cursor = reply[1]
  for i = 1, #reply[2], 2 do
    if #aggregates < limit then
      aggregates[#aggregates + 1] = reply[2][i]
      seqs[#seqs + 1] = reply[2][i + 1]
    end
  end
until cursor == '0' or #aggregates >= limit

local moved = {}
for i, aggregate in ipairs(aggregates) do
  local current = redis.call('HGET', guardKey(KEYS[1], aggregate), aggregate)
  if not current or (tonumber(current) or 0) < (tonumber(seqs[i]) or 0) then
    moved[#moved + 1] = aggregate
    moved[#moved + 1] = seqs[i]
  end
end
-- writeGuards deletes the moved fields from the old hash; the rest go here.
writeGuards(KEYS[1], KEYS[2], moved)
for first = 1, #aggregates, 500 do
  redis.call('HDEL', KEYS[1], unpack(aggregates, first, math.min(first + 499, #aggregates)))
end
return { #aggregates, redis.call('EXISTS', KEYS[1]) }
