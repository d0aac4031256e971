--[[
  Included (`--- @include "includes/claim-checks.lua"`, expanded by scripts.ts when it loads a
  script) by claim-event-9.lua and complete-event-10.lua, database mode's two steps, after their
  own definitions of what it uses: rcall, integer(text), problem(line), served (the store the meta
  hash names) and the tables ranks, lastOf and badAggregate; KEYS[1] the processing list, KEYS[2]
  the processed hash, KEYS[3] the applied-seq hash.

  checkEvent(e, usable): the phase-1 checks both steps make of one event. Sets e.kind:
    'stale'     not in the processing list (LPOS stops at the first match; the same message again
                in one call, a relay duplicate, needs the next one)
    'foreign'   from another store than the one this Redis serves
    'invalid'   its seq not a positive integer, `usable` false, or its aggregate's applied seq not
                an integer (a problem line says so)
    'candidate' otherwise, with e.processed (whether its processed entry exists), and
                lastOf[e.aggregate] its aggregate's applied seq (0 when none)
]]
local function checkEvent(e, usable)
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
    local value = rcall('HGET', KEYS[3], e.aggregate)
    lastOf[e.aggregate] = value and integer(value) or (not value and 0) or nil
    if lastOf[e.aggregate] == nil then
      badAggregate[e.aggregate] = true
      problem(KEYS[3] .. ' field ' .. e.aggregate .. ' holds "' .. value .. '", not an integer')
    end
  end
  if badAggregate[e.aggregate] then
    e.kind = 'invalid'
    return
  end
  e.kind = 'candidate'
  e.processed = rcall('HEXISTS', KEYS[2], e.eventId) == 1
end
