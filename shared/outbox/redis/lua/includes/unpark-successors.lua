--[[
  Included (`--- @include "includes/unpark-successors.lua"`, expanded by scripts.ts when it loads
  a script) by apply-events-14.lua, claim-event-11.lua and complete-event-12.lua, after the
  definitions of what it uses: rcall, int, counts (its `unparked`), deadLetter(reason, message)
  (includes/dead-letter.lua), problem(line), and KEYS[4] the parked hash, KEYS[6] the event queue,
  KEYS[8] the dead-letter list (named in the problem line).

  unparkSuccessors(aggregate, seq): the parked successors of an event just applied (completed), or
  of a duplicate that put its aggregate's lost seq guard back at its seq, back to the head of the
  queue at once and in seq order: seq + 1, seq + 2, ... as long as the parked hash holds the next,
  up to UNPARK_MAX (the last one, once applied, brings the next ones). One at a time, a chain of k
  parked events took k rounds. A corrupt entry goes to the dead letters (kept for
  an operator: `outbox dead-letter list` shows it); the seqs after it stay parked, waiting for it as
  any event waits for its predecessor. Every key it writes was type-checked before the script's
  first write.
]]
--- @include "includes/envelope.lua"
local UNPARK_MAX = 256
local function unparkSuccessors(aggregate, seq)
  local messages = {}
  for next = seq + 1, seq + UNPARK_MAX do
    local field = aggregate .. ':' .. int(next)
    local stored = rcall('HGET', KEYS[4], field)
    if not stored then break end
    rcall('HDEL', KEYS[4], field)
    local message = envelopeMessage(stored)
    if not message then
      deadLetter('corrupt parked entry ' .. field .. ' (not the JSON the consumer writes)', stored)
      problem(KEYS[4] .. ' field ' .. field .. ' was not valid JSON: moved to ' .. KEYS[8])
      break
    end
    messages[#messages + 1] = message
  end
  if #messages == 0 then return end
  -- LPUSH puts its last argument first: the chain reaches the head in seq order.
  local reversed = {}
  for k = #messages, 1, -1 do reversed[#reversed + 1] = messages[k] end
  rcall('LPUSH', KEYS[6], unpack(reversed))
  counts.unparked = counts.unparked + #messages
end
