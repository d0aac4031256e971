--[[
  Moves a message that is not a valid event from a processing list to the dead-letter list, with
  the reason. Idempotent: a re-sent call finds the message gone and does nothing.

  Input:
    KEYS[1] processing list holding the message
    KEYS[2] dead-letter list
    KEYS[3] stats hash

    ARGV[1] raw message
    ARGV[2] reason
    ARGV[3] now, ms since epoch

  Output:
    1 dead-lettered, 0 the message was not in the processing list (nothing done)
]]
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], cjson.encode({ reason = ARGV[2], message = ARGV[1], deadAt = tonumber(ARGV[3]) }))
redis.call('HINCRBY', KEYS[3], 'dead', 1)
return 1
