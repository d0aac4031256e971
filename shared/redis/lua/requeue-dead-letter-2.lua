--[[
  Moves one dead-lettered message back to the tail of the event queue (after the consumer learned
  to handle it). Idempotent: a re-sent call finds the entry gone and does nothing.

  Input:
    KEYS[1] dead-letter list
    KEYS[2] event queue

    ARGV[1] the dead-letter entry, exactly as stored (JSON {reason, message, deadAt})

  Output:
    1 moved, 0 the entry was not there
]]
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], cjson.decode(ARGV[1]).message)
return 1
