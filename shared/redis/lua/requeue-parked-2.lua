--[[
  Moves one parked event back to the head of the event queue, to be tried again at once.
  Idempotent: a re-sent call finds the field gone and does nothing.

  Input:
    KEYS[1] parked hash
    KEYS[2] event queue

    ARGV[1] the parked field, "<aggregate_id>:<seq>"

  Output:
    1 moved, 0 the field was not there
]]
local envelope = redis.call('HGET', KEYS[1], ARGV[1])
if not envelope then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[2], cjson.decode(envelope).message)
return 1
