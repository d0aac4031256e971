--[[
  Included (`--- @include "includes/claim-checks.lua"`, expanded by scripts.ts when it loads a
  script) by claim-event-11.lua and complete-event-12.lua, database mode's two steps, once their
  arguments are checked and after their definition of rcall: what both steps share.

  integer(text): the integer a text holds, exact in a Lua number (up to 2^53), or nil; int(n) its
  text back. now: Redis's TIME in ms, as text. problem(line): adds a line to `problems`, the
  script's last reply.

  readStats(names): the stats hash's (KEYS[5]) fields `names`, as HMGET returns them, and by name
  whether each is an integer or absent (a problem line for each that is not).

  checkEvent(e, usable, served): the phase-1 checks both steps make of one event (KEYS[1] the
  processing list, KEYS[2] the processed hash, KEYS[3] the applied-seq hash; `served` the store the
  meta hash names). Sets e.kind:
    'stale'     not in the processing list (LPOS stops at the first match; the same message again
                in one call, a relay duplicate, needs the next one)
    'foreign'   from another store than the one this Redis serves
    'invalid'   its seq not a positive integer, `usable` false, or its aggregate's applied seq not
                an integer (a problem line says so)
    'candidate' otherwise, with e.processed (whether its processed entry exists), and
                lastOf[e.aggregate] its aggregate's applied seq (0 when none)

  ack(e): phase 2's ack of one event: its message out of the processing list (KEYS[1]), and its
  failed attempts' count out of the attempts hash (KEYS[10], type-checked before the first write),
  which is looked at only while it exists.
]]
local MAX_EXACT = 9007199254740991
local function integer(text)
  if type(text) ~= 'string' or not string.match(text, '^%-?%d+$') then return nil end
  local n = tonumber(text)
  if not n or n > MAX_EXACT or n < -MAX_EXACT then return nil end
  return n
end
local function int(n) return string.format('%d', n) end

local clock = rcall('TIME')
local now = int(tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))

local problems = {}
local function problem(text) problems[#problems + 1] = text end

local function readStats(names)
  local values = rcall('HMGET', KEYS[5], unpack(names))
  local ok = {}
  for i, name in ipairs(names) do
    ok[name] = not values[i] or integer(values[i]) ~= nil
    if not ok[name] then problem(KEYS[5] .. ' field ' .. name .. ' holds "' .. values[i] .. '", not an integer') end
  end
  return values, ok
end

-- Per call: each aggregate's applied seq once read (lastOf), or that it is not an integer
-- (badAggregate); each message's matches in the processing list taken so far (ranks).
local lastOf, badAggregate, ranks = {}, {}, {}
local function checkEvent(e, usable, served)
  local rank = (ranks[e.raw] or 0) + 1
  if not rcall('LPOS', KEYS[1], e.raw, 'RANK', rank) then
    e.kind = 'stale'
    return
  end
  ranks[e.raw] = rank
  if e.store ~= served then
    e.kind = 'foreign'
    return
  end
  if not e.seq or e.seq < 1 or not usable then
    e.kind = 'invalid'
    return
  end
  if lastOf[e.aggregate] == nil and not badAggregate[e.aggregate] then
    local value = readGuards(KEYS[3], { e.aggregate })[1]
    lastOf[e.aggregate] = value and integer(value) or (not value and 0) or nil
    if lastOf[e.aggregate] == nil then
      badAggregate[e.aggregate] = true
      problem(guardKey(KEYS[3], e.aggregate) .. ' field ' .. e.aggregate .. ' holds "' .. value .. '", not an integer')
    end
  end
  if badAggregate[e.aggregate] then
    e.kind = 'invalid'
    return
  end
  e.kind = 'candidate'
  e.processed = rcall('HEXISTS', KEYS[2], e.eventId) == 1
end

local anyAttempts
local function ack(e)
  rcall('LREM', KEYS[1], 1, e.raw)
  if anyAttempts == nil then anyAttempts = rcall('EXISTS', KEYS[10]) == 1 end
  if anyAttempts then rcall('HDEL', KEYS[10], e.eventId) end
end
