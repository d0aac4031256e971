--[[
  Makes this Redis serve a store, unless it already serves one. The relay calls it when the meta
  hash is gone: on first use, or after Redis lost its state and the relay set every published row
  back to PENDING (a rebuild). Idempotent: a second call finds the store named and changes nothing.

  When it claims, it first deletes whatever consumer state is left (processed, applied seqs, every
  key an effect wrote as recorded in the effect-keys set, parked, stats, apply counts,
  failed-attempt counts, the dedupe window's log and hash): every effect is about to be applied again from SQLite, so leftovers of
  a partial loss (the meta hash gone, an effect's key still there) would be applied twice, or applied
  seqs without their effects would skip the events as duplicates. The caller deleted the dedupe
  markers before (no consumer applies anything while no store is claimed). Then it gives pruned
  aggregates their applied seq, in the same step, so that no consumer sees the store claimed
  without them.

  Input:
    KEYS[1] meta hash
    KEYS[2] processed hash
    KEYS[3] applied-seq key: the base name of the guards' buckets (includes/guards.lua), and the
            hash of the layout before them
    KEYS[4] effect-keys set (full names of the keys effects wrote; deleted with the set)
    KEYS[5] parked hash
    KEYS[6] stats hash
    KEYS[7] apply-count hash
    KEYS[8] attempts hash
    KEYS[9] applied log (the dedupe window's)
    KEYS[10] window hash

    ARGV[1] store id
    ARGV[2] now, ms since epoch
    ARGV[3] events set back to PENDING by the rebuild ('' on first use)
    ARGV[4] events that cannot be rebuilt (pruned from SQLite before the loss; '' on first use)
    ARGV[5] the partition these keys hold, "i/P" (see partitions.ts; "0/1" on one Redis without
            partitions), recorded as the meta hash's field 'partition'
    ARGV[6..] pairs: aggregate id, seq it was pruned through

  Output: { status, store }
    { 'claimed', id }  this Redis now serves store id
    { 'served', id }   it already served store id (which may be another store): nothing done
]]
local served = redis.call('HGET', KEYS[1], 'store')
if served then return { 'served', served } end
-- UNLINK: a large processed hash is freed in the background, not while Redis waits. The effect
-- keys are named by the set (derived, not declared: one Redis, not a Cluster), in slices.
local effectKeys = redis.call('SMEMBERS', KEYS[4])
for first = 1, #effectKeys, 1000 do
  redis.call('UNLINK', unpack(effectKeys, first, math.min(first + 999, #effectKeys)))
end
redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10])
-- Every bucket of guards, named (derived from KEYS[3]: they share its hash tag).
for first = 0, 65535, 1024 do
  local names = {}
  for i = first, first + 1023 do names[#names + 1] = KEYS[3] .. ':' .. string.format('%04x', i) end
  redis.call('UNLINK', unpack(names))
end
--- @include "includes/guards.lua"
local pruned = {}
for i = 6, #ARGV do pruned[#pruned + 1] = ARGV[i] end
writeGuards(KEYS[3], KEYS[10], pruned)
redis.call('HSET', KEYS[1], 'store', ARGV[1], 'claimedAt', ARGV[2], 'partition', ARGV[5])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'rebuiltAt', ARGV[2], 'rebuiltEvents', ARGV[3], 'unrecoverable', ARGV[4])
end
return { 'claimed', ARGV[1] }
