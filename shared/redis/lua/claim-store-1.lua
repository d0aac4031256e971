--[[
  Makes this Redis serve a store, unless it already serves one. The relay calls it when the meta
  hash is gone: on first use, or after Redis lost its state and the relay set every published row
  back to PENDING (a rebuild). Idempotent: a second call finds the store named and changes nothing.

  Input:
    KEYS[1] meta hash

    ARGV[1] store id
    ARGV[2] now, ms since epoch
    ARGV[3] events set back to PENDING by the rebuild ('' on first use)
    ARGV[4] events that cannot be rebuilt (pruned from SQLite before the loss; '' on first use)

  Output: { status, store }
    { 'claimed', id }  this Redis now serves store id
    { 'served', id }   it already served store id (which may be another store): nothing done
]]
local served = redis.call('HGET', KEYS[1], 'store')
if served then return { 'served', served } end
redis.call('HSET', KEYS[1], 'store', ARGV[1], 'claimedAt', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'rebuiltAt', ARGV[2], 'rebuiltEvents', ARGV[3], 'unrecoverable', ARGV[4])
end
return { 'claimed', ARGV[1] }
