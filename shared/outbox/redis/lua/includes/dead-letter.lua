--[[
  Included (`--- @include "includes/dead-letter.lua"`, expanded by scripts.ts when it loads a
  script) by apply-events-14.lua, claim-event-11.lua and complete-event-12.lua, in their phase 2,
  after their own definitions of what it uses: rcall, now (Redis's TIME in ms, as text), counts (its
  `dead`), and KEYS[8] the dead-letter list, type-checked before the script's first write.

  deadLetter(reason, message): appends { reason, message, deadAt } to the dead-letter list, counted.
  deadLetterForeign(store, served, message): dead-letters a message of store `store` that this Redis
  does not serve (`served`: the store it serves, nil when it serves none), saying which.
]]
local function deadLetter(reason, message)
  rcall('RPUSH', KEYS[8], cjson.encode({ reason = reason, message = message, deadAt = tonumber(now) }))
  counts.dead = counts.dead + 1
end

local function deadLetterForeign(store, served, message)
  deadLetter(served and ('from store ' .. store .. ', but this Redis serves store ' .. served)
    or ('from store ' .. store .. ', but this Redis serves no store (it lost its state; the relay rebuilds it from SQLite)'), message)
end
