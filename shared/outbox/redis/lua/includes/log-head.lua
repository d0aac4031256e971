--[[
  Included (`--- @include "includes/log-head.lua"`) by sweep-window-5.lua and sweep-horizon-3.lua:
  the two sweeps read a log of the same shape, a time entry `t<ms>` then the entries of that batch.

  readLogHead(key, limit, cutoff): reads at most `limit` entries from the head of list `key` and
  stops before the first time entry later than `cutoff`. Returns the entries read that are not
  times (the batches' own: those at the head before any time belong to a batch an earlier call
  started on), how many entries were consumed, and the last time consumed (nil when none).

  raiseThrough(key, field, through): sets hash `key`'s `field` to `through` when that is higher.
]]
local function readLogHead(key, limit, cutoff)
  local items, consumed, through = {}, 0, nil
  for i, entry in ipairs(redis.call('LRANGE', key, 0, limit - 1)) do
    if string.sub(entry, 1, 1) == 't' then
      local at = tonumber(string.sub(entry, 2))
      if at and at > cutoff then break end
      if at then through = at end
    else
      items[#items + 1] = entry
    end
    consumed = i
  end
  return items, consumed, through
end

local function raiseThrough(key, field, through)
  if not through then return end
  local before = tonumber(redis.call('HGET', key, field) or '0') or 0
  if through > before then redis.call('HSET', key, field, string.format('%d', through)) end
end
