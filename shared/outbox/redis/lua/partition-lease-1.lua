--[[
  One consumer's lease on one partition: who consumes it. Leases are for sharing the work, not for
  safety: two consumers on one partition apply each event once and in order all the same (markers,
  seq guard, ack in the apply script); a lease only keeps them from doing the same work twice.

  Input:
    KEYS[1] the partition's lease (string: the owner, with a TTL)

    ARGV[1] 'acquire' (SET NX with the TTL), 'renew' (the TTL again, only while the owner holds it)
            or 'release' (deleted, only while the owner holds it)
    ARGV[2] the owner: consumer id and a token of this run of the process
    ARGV[3] TTL in ms (a whole number > 0; ignored by 'release')

  Output: 1 when the owner holds the lease after the call ('release': when it held it and let it
  go), else 0.
]]
local op, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not owner or owner == '' or not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('partition-lease: give an owner and a TTL in whole ms')
end
local holder = redis.call('GET', KEYS[1])
if op == 'acquire' then
  if holder == owner then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return 1
  end
  if holder then return 0 end
  redis.call('SET', KEYS[1], owner, 'PX', ttl)
  return 1
elseif op == 'renew' then
  if holder ~= owner then return 0 end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
elseif op == 'release' then
  if holder ~= owner then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
end
return redis.error_reply('partition-lease: ARGV[1] must be acquire, renew or release')
