--[[
  Included (`--- @include "includes/envelope.lua"`, expanded by scripts.ts when it loads a script)
  by the scripts that take a message back out of the parked hash or the dead-letter list:
  requeue-parked-2.lua, requeue-dead-letter-2.lua, raise-applied-seq-4.lua, and
  includes/unpark-successors.lua.

  envelopeMessage(stored): the message an envelope holds (the JSON {reason, message, parkedAt or
  deadAt} the consumer wraps a message in when it sets it aside; envelope.ts reads the same), or
  nil when `stored` is not one.
]]
local function envelopeMessage(stored)
  local ok, envelope = pcall(cjson.decode, stored)
  if ok and type(envelope) == 'table' and type(envelope.message) == 'string' then return envelope.message end
  return nil
end
