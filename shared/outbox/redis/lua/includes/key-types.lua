--[[
  Included (`--- @include "includes/key-types.lua"`, expanded by scripts.ts when it loads a script)
  by apply-events-14.lua, claim-event-11.lua, complete-event-12.lua, raise-applied-seq-4.lua,
  requeue-parked-2.lua and requeue-dead-letter-2.lua, before their first write.

  wrongKeyType(script, expected, nothing): the keys a script may write without having read them
  first, each { key, type } in `expected`: a key of another type would fail at its write, after
  other writes (Redis does not roll a script back). Returns the error reply for the first such key
  (WRONGTYPE first, as Redis's own error would be: the callers explain that error by it), naming
  the script, the key and `nothing` (what was not done); nil when every key is of its type or absent.
]]
local function wrongKeyType(script, expected, nothing)
  for _, k in ipairs(expected) do
    local t = redis.call('TYPE', k[1]).ok
    if t ~= 'none' and t ~= k[2] then
      return redis.error_reply('WRONGTYPE ' .. script .. ': ' .. k[1] .. ' holds a ' .. t .. ', not a ' .. k[2] .. ': ' .. nothing)
    end
  end
end
