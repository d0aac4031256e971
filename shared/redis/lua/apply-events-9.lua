--[[
  Applies a batch of events, in order, each exactly once and in seq order per aggregate, and acks
  each: per event one atomic step, so a crash can never leave a dedupe marker set without the
  effect (the SET NX crash window). The batch runs as one script: same result as one call per
  event, with one round trip.

  Input:
    KEYS[1] processing list the messages were moved to (the ack is LREM from it)
    KEYS[2] processed hash
    KEYS[3] applied-seq hash (aggregate_id -> last applied seq)
    KEYS[4] inventory hash (sku -> reserved qty)
    KEYS[5] parked hash ("<aggregate_id>:<seq>" -> JSON envelope)
    KEYS[6] stats hash
    KEYS[7] event queue (an unparked successor is pushed back to its head)
    KEYS[8] meta hash; its field 'store' names the store this Redis serves
    KEYS[9] dead-letter list (a message of another store goes there)

    ARGV[1] dedupe marker key prefix; the marker of an event is <prefix><event_id>. (Derived, not
            declared: like the rest of this project, the script expects one Redis, not a Cluster.)
    ARGV[2] dedupe marker TTL in seconds (0 = never expires)
    ARGV[3] now, ms since epoch
    then 8 values per event, from ARGV[4]:
      raw message exactly as it sits in the processing list, event_id, aggregate_id, seq, sku,
      inventory delta (integer, may be negative), processed value (a JSON object, to which the
      script adds "applyOrder", the stats hash's 'applied' counter, and "appliedAt", ARGV[3]),
      store id of the message

  Output: one status per event, in order:
    'invalid'   seq or delta is not a number, or applied-seq / inventory holds a non-number for it:
                nothing done, the message stays in the processing list
    'stale'     the message was not in the processing list (already acked, e.g. a re-sent call): nothing done
    'foreign'   the message comes from another store than the one this Redis serves (or Redis serves
                none: it lost its state): acked and dead-lettered with the reason, no effect
    'duplicate' seen before, or seq <= last applied: acked, no effect
    'parked'    seq > last applied + 1: acked and parked until the gap is filled
    'applied'   effect applied, recorded in processed, acked; a parked successor is re-queued
]]
local rcall = redis.call
local prefix, ttl, now = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local FIELDS = 8
local count = (#ARGV - 3) / FIELDS
if not ttl or count ~= math.floor(count) then
  return redis.error_reply('apply-events: ttl must be a number and each event needs 8 values')
end
local served = rcall('HGET', KEYS[8], 'store')

local applied = tonumber(rcall('HGET', KEYS[6], 'applied') or '0')
local counts = { duplicates = 0, parked = 0, unparked = 0, dead = 0 }
-- Parked events are rare: while the hash is empty, no event needs its parked entries looked at.
local anyParked = rcall('EXISTS', KEYS[5]) == 1

-- Usually the batch is exactly the head of the processing list, in order: then one LTRIM acks it
-- all. Otherwise (a re-sent call, messages left over) each message is acked with its own LREM.
local head = rcall('LRANGE', KEYS[1], 0, count - 1)
local atHead = #head == count
for i = 0, count - 1 do
  if not atHead or head[i + 1] ~= ARGV[4 + i * FIELDS] then
    atHead = false
    break
  end
end
if atHead then rcall('LTRIM', KEYS[1], count, -1) end

local outcomes = {}
for i = 0, count - 1 do
  local base = 4 + i * FIELDS
  local raw, eventId, aggregate, seq, sku, delta = ARGV[base], ARGV[base + 1], ARGV[base + 2], tonumber(ARGV[base + 3]), ARGV[base + 4], tonumber(ARGV[base + 5])
  local store = ARGV[base + 7]
  local seenKey = prefix .. eventId
  local parkedField = aggregate .. ':' .. seq
  local last = tonumber(rcall('HGET', KEYS[3], aggregate) or '0')
  local outcome

  -- Nothing below may fail after the first write of an event, or the event would be half done:
  -- a bad number is refused before, a failed HINCRBY is undone.
  if store ~= served then
    if atHead or rcall('LREM', KEYS[1], 1, raw) == 1 then
      local reason = served and ('from store ' .. store .. ', but this Redis serves store ' .. served)
        or ('from store ' .. store .. ', but this Redis serves no store (it lost its state; the relay rebuilds it from SQLite)')
      rcall('RPUSH', KEYS[9], cjson.encode({ reason = reason, message = raw, deadAt = tonumber(now) }))
      counts.dead = counts.dead + 1
      outcome = 'foreign'
    else
      outcome = 'stale'
    end
  elseif not seq or not delta or not last then
    if atHead then rcall('RPUSH', KEYS[1], raw) end
    outcome = 'invalid'
  elseif not atHead and rcall('LREM', KEYS[1], 1, raw) == 0 then
    outcome = 'stale'
  else
    local fresh
    if ttl > 0 then
      fresh = rcall('SET', seenKey, '1', 'NX', 'EX', ttl)
    else
      fresh = rcall('SET', seenKey, '1', 'NX')
    end

    if not fresh or seq <= last then
      if anyParked then rcall('HDEL', KEYS[5], parkedField) end
      counts.duplicates = counts.duplicates + 1
      outcome = 'duplicate'
    elseif seq > last + 1 then
      -- Not applied, so it must not count as seen: its redelivery has to be applied later.
      rcall('DEL', seenKey)
      local reason = 'gap: expected seq ' .. (last + 1) .. ', got ' .. seq
      rcall('HSET', KEYS[5], parkedField, cjson.encode({ reason = reason, message = raw, parkedAt = tonumber(now) }))
      anyParked = true
      counts.parked = counts.parked + 1
      outcome = 'parked'
    elseif type(redis.pcall('HINCRBY', KEYS[4], sku, delta)) == 'table' then
      -- The inventory field holds a non-number (HINCRBY failed, nothing changed): undo the event's
      -- writes and leave the message for an operator.
      rcall('DEL', seenKey)
      rcall('RPUSH', KEYS[1], raw)
      outcome = 'invalid'
    else
      applied = applied + 1
      rcall('HSET', KEYS[2], eventId, string.sub(ARGV[base + 6], 1, -2) .. ',"applyOrder":' .. applied .. ',"appliedAt":' .. now .. '}')
      rcall('HSET', KEYS[3], aggregate, seq)
      if anyParked then
        rcall('HDEL', KEYS[5], parkedField)
        local successorField = aggregate .. ':' .. (seq + 1)
        local successor = rcall('HGET', KEYS[5], successorField)
        if successor then
          rcall('HDEL', KEYS[5], successorField)
          rcall('LPUSH', KEYS[7], cjson.decode(successor).message)
          counts.unparked = counts.unparked + 1
        end
      end
      outcome = 'applied'
    end
  end
  outcomes[#outcomes + 1] = outcome
end

rcall('HSET', KEYS[6], 'applied', applied)
for name, n in pairs(counts) do
  if n > 0 then rcall('HINCRBY', KEYS[6], name, n) end
end
return outcomes
