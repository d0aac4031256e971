--[[
  Applies one event exactly once, in seq order, and acks it: one atomic step, so a crash can never
  leave the dedupe marker set without the effect (the SET NX crash window).

  Input:
    KEYS[1] processing list the message was moved to (the ack is LREM from it)
    KEYS[2] dedupe marker of this event (outbox:seen:<event_id>)
    KEYS[3] processed hash
    KEYS[4] applied-seq hash (aggregate_id -> last applied seq)
    KEYS[5] inventory hash (sku -> reserved qty)
    KEYS[6] parked hash ("<aggregate_id>:<seq>" -> JSON envelope)
    KEYS[7] stats hash
    KEYS[8] event queue (an unparked successor is pushed back to its head)

    ARGV[1] raw message, exactly as it sits in the processing list
    ARGV[2] event_id
    ARGV[3] aggregate_id
    ARGV[4] seq
    ARGV[5] sku
    ARGV[6] inventory delta (integer, may be negative)
    ARGV[7] processed value: a JSON object, to which the script adds "applyOrder" (the value of the
            stats hash's 'applied' counter: the global order in which events were applied) and
            "appliedAt" (ARGV[9])
    ARGV[8] dedupe marker TTL in seconds (0 = never expires)
    ARGV[9] now, ms since epoch

  Output:
    'stale'     the message was not in the processing list (already acked, e.g. a re-sent call): nothing done
    'duplicate' seen before, or seq <= last applied: acked, no effect
    'parked'    seq > last applied + 1: acked and parked until the gap is filled
    'applied'   effect applied, recorded in processed, acked; a parked successor is re-queued
]]
local rcall = redis.call
local raw, eventId, aggregate, sku = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local seq, delta, ttl = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[8])
if not seq or not delta or not ttl then
  return redis.error_reply('apply-event: seq, delta and ttl must be numbers')
end

-- Every check that can fail comes before the first write: Redis does not roll a script back.
local last = tonumber(rcall('HGET', KEYS[4], aggregate) or '0')
local reserved = rcall('HGET', KEYS[5], sku)
if not last or (reserved and not tonumber(reserved)) then
  return redis.error_reply('apply-event: applied-seq or inventory hash holds a non-number')
end

if rcall('LREM', KEYS[1], 1, raw) == 0 then
  return 'stale'
end

local parkedField = aggregate .. ':' .. seq
local fresh
if ttl > 0 then
  fresh = rcall('SET', KEYS[2], '1', 'NX', 'EX', ttl)
else
  fresh = rcall('SET', KEYS[2], '1', 'NX')
end

if not fresh or seq <= last then
  rcall('HDEL', KEYS[6], parkedField)
  rcall('HINCRBY', KEYS[7], 'duplicates', 1)
  return 'duplicate'
end

if seq > last + 1 then
  -- Not applied, so it must not count as seen: its redelivery has to be applied later.
  rcall('DEL', KEYS[2])
  local reason = 'gap: expected seq ' .. (last + 1) .. ', got ' .. seq
  rcall('HSET', KEYS[6], parkedField, cjson.encode({ reason = reason, message = raw, parkedAt = tonumber(ARGV[9]) }))
  rcall('HINCRBY', KEYS[7], 'parked', 1)
  return 'parked'
end

rcall('HINCRBY', KEYS[5], sku, delta)
local applyOrder = rcall('HINCRBY', KEYS[7], 'applied', 1)
rcall('HSET', KEYS[3], eventId, string.sub(ARGV[7], 1, -2) .. ',"applyOrder":' .. applyOrder .. ',"appliedAt":' .. ARGV[9] .. '}')
rcall('HSET', KEYS[4], aggregate, seq)
rcall('HDEL', KEYS[6], parkedField)

local successorField = aggregate .. ':' .. (seq + 1)
local successor = rcall('HGET', KEYS[6], successorField)
if successor then
  rcall('HDEL', KEYS[6], successorField)
  rcall('LPUSH', KEYS[8], cjson.decode(successor).message)
  rcall('HINCRBY', KEYS[7], 'unparked', 1)
end
return 'applied'
