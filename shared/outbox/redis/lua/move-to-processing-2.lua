--[[
  Moves up to ARGV[1] messages, one LMOVE each, from the head of the event queue to the tail of a
  consumer's processing list, and returns them: the same as that many LMOVE calls, in one round
  trip.

  Input:
    KEYS[1] event queue
    KEYS[2] processing list

    ARGV[1] how many at most

  Output:
    the messages moved, in order (empty when the queue is empty)
]]
local moved = {}
for _ = 1, tonumber(ARGV[1]) do
  local message = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not message then break end
  moved[#moved + 1] = message
end
return moved
