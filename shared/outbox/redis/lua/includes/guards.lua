--[[
  Included by every script that reads or writes a seq guard (an aggregate's last applied seq).

  The guards live in up to 65,536 bucket hashes, `<applied-seq>:<bucket>`, the bucket being the
  first 4 hex digits of the aggregate's SHA-1 (guards.ts computes the same). Small hashes are kept
  as listpacks: a guard costs about a third of what a field of one big hash costs. The key
  `<applied-seq>` itself is the layout before buckets: read where a bucket has no guard, and
  emptied by migrate-guards-2.lua and by each write of a guard it held.

  `base` is the applied-seq key (declared: the buckets share its hash tag); `window` the window
  hash, whose field 'guards' counts the guards in buckets.

  readGuards(base, aggregates) -> values (false where none), as HMGET would answer
  writeGuards(base, window, flatPairs): flatPairs is flat aggregate, seq text, …
  dropGuards(base, window, aggregates): deletes them; returns how many were there
]]
local guardKeyOf = {}
local function guardKey(base, aggregate)
  local key = guardKeyOf[aggregate]
  if not key then
    key = base .. ':' .. string.sub(redis.sha1hex(aggregate), 1, 4)
    guardKeyOf[aggregate] = key
  end
  return key
end

local legacyGuards
local function hasLegacyGuards(base)
  if legacyGuards == nil then legacyGuards = redis.call('EXISTS', base) == 1 end
  return legacyGuards
end

local function readGuards(base, aggregates)
  local values = {}
  for i = 1, #aggregates do
    values[i] = redis.call('HGET', guardKey(base, aggregates[i]), aggregates[i])
  end
  if hasLegacyGuards(base) then
    for i = 1, #aggregates do
      if not values[i] then values[i] = redis.call('HGET', base, aggregates[i]) end
    end
  end
  return values
end

local function writeGuards(base, window, flatPairs)
  local added = 0
  for k = 1, #flatPairs, 2 do
    added = added + redis.call('HSET', guardKey(base, flatPairs[k]), flatPairs[k], flatPairs[k + 1])
  end
  if hasLegacyGuards(base) then
    for k = 1, #flatPairs, 2 do redis.call('HDEL', base, flatPairs[k]) end
  end
  if added > 0 then redis.call('HINCRBY', window, 'guards', added) end
end

local function dropGuards(base, window, aggregates)
  local dropped = 0
  for i = 1, #aggregates do
    dropped = dropped + redis.call('HDEL', guardKey(base, aggregates[i]), aggregates[i])
  end
  if dropped > 0 then redis.call('HINCRBY', window, 'guards', -dropped) end
  if hasLegacyGuards(base) then
    for i = 1, #aggregates do dropped = dropped + redis.call('HDEL', base, aggregates[i]) end
  end
  return dropped
end
