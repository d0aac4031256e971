--[[
  Applies a batch of events, in order, each at most once and in seq order per aggregate, and acks
  each in the same step: a message leaves the processing list only together with its effect, its
  parking or its dead-lettering. Redis does not roll a script back, so the script reads and checks
  everything it will need first (phase 1) and writes only after that (phase 2); nothing in phase 2
  can fail on the data it finds. Bad state it meets (a non-number where a count belongs, a parked
  entry that is not JSON) is reported, never half-applied.

  Input:
    KEYS[1]  processing list the messages were moved to (the ack removes them from it)
    KEYS[2]  processed hash (event_id -> JSON result)
    KEYS[3]  applied-seq hash (aggregate_id -> last applied seq)
    KEYS[4]  inventory hash (sku -> reserved qty)
    KEYS[5]  parked hash ("<aggregate_id>:<seq>" -> JSON {reason, message, parkedAt})
    KEYS[6]  stats hash (applied, duplicates, parked, unparked, dead)
    KEYS[7]  event queue (an unparked successor is pushed back to its head)
    KEYS[8]  meta hash; its field 'store' names the store this Redis serves
    KEYS[9]  dead-letter list (a message of another store, or a corrupt parked entry, goes there)
    KEYS[10] apply-count hash (event_id -> times its effect was applied: the evidence verify reads)
    KEYS[11] attempts hash (event_id -> failed handler attempts): an acked event's entry goes

    ARGV[1] dedupe marker key prefix; the marker of an event is <prefix><event_id>. (Derived, not
            declared: like the rest of this project, the script expects one Redis, not a Cluster.)
    ARGV[2] dedupe marker TTL in seconds (0 = never expires)
    then 8 values per event, from ARGV[3]:
      raw message exactly as it sits in the processing list, event_id, aggregate_id, seq (an
      integer), sku, inventory delta (an integer, may be negative), processed value (a JSON object,
      to which the script adds "applyOrder", the stats hash's 'applied' counter, and "appliedAt"),
      store id of the message

  Time: appliedAt, parkedAt and deadAt are Redis's clock (TIME, ms since epoch) when the script
  runs, i.e. when the event was applied, not when the consumer built the call. (TIME is allowed in
  a script that writes: Redis >= 5 replicates a script's effects, not the script.)

  Output: { outcomes, problems }
    outcomes, one per event, in order:
      'invalid'   its seq or delta is not an integer, or Redis holds bad state it would need (see
                  problems): nothing done, the message stays in the processing list
      'stale'     the message was not in the processing list (already acked, e.g. a re-sent call): nothing done
      'foreign'   the message comes from another store than the one this Redis serves (or Redis serves
                  none: it lost its state): acked and dead-lettered with the reason, no effect
      'duplicate' seen before (dedupe marker, processed entry, or seq <= last applied): acked, no effect
      'parked'    seq > last applied + 1: acked and parked until the gap is filled
      'applied'   effect applied, counted, recorded in processed, acked; a parked successor is re-queued
    problems: one line per piece of bad state met (empty when none)
]]
local rcall = redis.call
local prefix, ttl = ARGV[1], tonumber(ARGV[2])
local FIELDS = 8
local FIRST = 3
local count = (#ARGV - FIRST + 1) / FIELDS
if not ttl or count ~= math.floor(count) then
  return redis.error_reply('apply-events: ttl must be a number and each event needs 8 values')
end

-- Integers as Redis stores them: exact in a Lua number up to 2^53, printed back with %d.
local MAX_EXACT = 9007199254740991
local function integer(text)
  if type(text) ~= 'string' or not string.match(text, '^%-?%d+$') then return nil end
  local n = tonumber(text)
  if not n or n > MAX_EXACT or n < -MAX_EXACT then return nil end
  return n
end
local function int(n) return string.format('%d', n) end

local clock = rcall('TIME')
local now = int(tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))

local problems = {}
local function problem(text) problems[#problems + 1] = text end

-- Phase 1: read and check. No write happens before it ends.
local served = rcall('HGET', KEYS[8], 'store')
local STATS = { 'applied', 'duplicates', 'parked', 'unparked', 'dead' }
local statValues = rcall('HMGET', KEYS[6], unpack(STATS))
local statOk = {}
for i, name in ipairs(STATS) do
  local value = statValues[i]
  statOk[name] = not value or integer(value) ~= nil
  if not statOk[name] then problem(KEYS[6] .. ' field ' .. name .. ' holds "' .. value .. '", not an integer') end
end
local applied = statOk.applied and (integer(statValues[1] or '0')) or nil

-- Usually the batch is exactly the head of the processing list, in order: then one LTRIM acks it all.
local head = rcall('LRANGE', KEYS[1], 0, count - 1)
local atHead = #head == count
for i = 0, count - 1 do
  if not atHead or head[i + 1] ~= ARGV[FIRST + i * FIELDS] then
    atHead = false
    break
  end
end

local lastOf, inventoryOf, badAggregate, badSku = {}, {}, {}, {}
local present = {}
local plan = {}
for i = 0, count - 1 do
  local base = FIRST + i * FIELDS
  local e = {
    raw = ARGV[base], eventId = ARGV[base + 1], aggregate = ARGV[base + 2], seqText = ARGV[base + 3],
    sku = ARGV[base + 4], result = ARGV[base + 6], store = ARGV[base + 7],
    seq = integer(ARGV[base + 3]), delta = integer(ARGV[base + 5]),
  }
  if not atHead then
    -- Not at the head: each message must still be in the list (a re-sent call finds it gone).
    if present[e.raw] == nil then present[e.raw] = #rcall('LPOS', KEYS[1], e.raw, 'COUNT', 0) end
    if present[e.raw] > 0 then
      present[e.raw] = present[e.raw] - 1
    else
      e.kind = 'stale'
    end
  end
  if e.kind then
    -- stale: nothing more to check
  elseif e.store ~= served then
    e.kind = 'foreign'
  elseif not e.seq or e.seq < 1 or not e.delta or not applied then
    e.kind = 'invalid'
  else
    if lastOf[e.aggregate] == nil and not badAggregate[e.aggregate] then
      local value = rcall('HGET', KEYS[3], e.aggregate)
      lastOf[e.aggregate] = value and integer(value) or (not value and 0) or nil
      if lastOf[e.aggregate] == nil then
        badAggregate[e.aggregate] = true
        problem(KEYS[3] .. ' field ' .. e.aggregate .. ' holds "' .. value .. '", not an integer')
      end
    end
    if inventoryOf[e.sku] == nil and not badSku[e.sku] then
      local value = rcall('HGET', KEYS[4], e.sku)
      inventoryOf[e.sku] = value and integer(value) or (not value and 0) or nil
      if inventoryOf[e.sku] == nil then
        badSku[e.sku] = true
        problem(KEYS[4] .. ' field ' .. e.sku .. ' holds "' .. value .. '", not an integer')
      end
    end
    if badAggregate[e.aggregate] or badSku[e.sku] then
      e.kind = 'invalid'
    else
      e.kind = 'candidate'
      e.processed = rcall('HEXISTS', KEYS[2], e.eventId) == 1
    end
  end
  plan[#plan + 1] = e
end

-- Phase 2: write. Every value used below was checked above.
local counts = { duplicates = 0, parked = 0, unparked = 0, dead = 0 }
local anyParked = rcall('EXISTS', KEYS[5]) == 1
-- Failed handler attempts are rare too: only while some are counted does an ack clear its entry.
local anyAttempts = rcall('EXISTS', KEYS[11]) == 1
local outcomes = {}
local acked = {}
local allAcked = true

local function deadLetter(reason, message)
  rcall('RPUSH', KEYS[9], cjson.encode({ reason = reason, message = message, deadAt = tonumber(now) }))
  counts.dead = counts.dead + 1
end

for _, e in ipairs(plan) do
  local outcome
  if e.kind == 'stale' or e.kind == 'invalid' then
    outcome = e.kind
  elseif e.kind == 'foreign' then
    deadLetter(served and ('from store ' .. e.store .. ', but this Redis serves store ' .. served)
      or ('from store ' .. e.store .. ', but this Redis serves no store (it lost its state; the relay rebuilds it from SQLite)'), e.raw)
    outcome = 'foreign'
  else
    local seenKey = prefix .. e.eventId
    local parkedField = e.aggregate .. ':' .. e.seqText
    local last = lastOf[e.aggregate]
    local inventory = inventoryOf[e.sku] + e.delta
    -- The dedupe marker is set first, as the design asks; the checks after it undo it when the
    -- event is not applied now.
    local fresh
    if ttl > 0 then
      fresh = rcall('SET', seenKey, '1', 'NX', 'EX', ttl)
    else
      fresh = rcall('SET', seenKey, '1', 'NX')
    end
    if not fresh or e.processed or e.seq <= last then
      -- Seen before: by its marker, by its processed entry (even with the marker and the applied
      -- seq gone), or by the seq guard.
      if anyParked then rcall('HDEL', KEYS[5], parkedField) end
      if e.processed and e.seq > last then
        -- Applied before, but its applied seq was lost: put the seq guard back.
        lastOf[e.aggregate] = e.seq
        rcall('HSET', KEYS[3], e.aggregate, e.seqText)
      end
      counts.duplicates = counts.duplicates + 1
      outcome = 'duplicate'
    elseif e.seq > last + 1 then
      -- Not applied, so it must not count as seen: its redelivery has to be applied later.
      rcall('DEL', seenKey)
      local reason = 'gap: expected seq ' .. int(last + 1) .. ', got ' .. e.seqText
      rcall('HSET', KEYS[5], parkedField, cjson.encode({ reason = reason, message = e.raw, parkedAt = tonumber(now) }))
      anyParked = true
      counts.parked = counts.parked + 1
      outcome = 'parked'
    elseif inventory > MAX_EXACT or inventory < -MAX_EXACT then
      rcall('DEL', seenKey)
      problem(KEYS[4] .. ' field ' .. e.sku .. ' would leave the exact integer range')
      outcome = 'invalid'
    else
      applied = applied + 1
      inventoryOf[e.sku] = inventory
      lastOf[e.aggregate] = e.seq
      rcall('HINCRBY', KEYS[4], e.sku, e.delta)
      rcall('HSET', KEYS[2], e.eventId, string.sub(e.result, 1, -2) .. ',"applyOrder":' .. int(applied) .. ',"appliedAt":' .. now .. '}')
      rcall('HSET', KEYS[3], e.aggregate, e.seqText)
      -- The count is evidence, not a condition: a field holding a non-number is reported, and
      -- pcall keeps its error from aborting the script after the writes above.
      local times = redis.pcall('HINCRBY', KEYS[10], e.eventId, 1)
      if type(times) == 'table' then
        problem(KEYS[10] .. ' field ' .. e.eventId .. ' holds a non-integer: this application was not counted')
      elseif times > 1 then
        problem('event ' .. e.eventId .. ' was applied more than once (its processed entry had been removed)')
      end
      if anyParked then
        rcall('HDEL', KEYS[5], parkedField)
        local successorField = e.aggregate .. ':' .. int(e.seq + 1)
        local successor = rcall('HGET', KEYS[5], successorField)
        if successor then
          rcall('HDEL', KEYS[5], successorField)
          local ok, envelope = pcall(cjson.decode, successor)
          if ok and type(envelope) == 'table' and type(envelope.message) == 'string' then
            rcall('LPUSH', KEYS[7], envelope.message)
            counts.unparked = counts.unparked + 1
          else
            -- Kept for an operator, not lost: `outbox dead-letter list` shows it.
            deadLetter('corrupt parked entry ' .. successorField .. ' (not the JSON the consumer writes)', successor)
            problem(KEYS[5] .. ' field ' .. successorField .. ' was not valid JSON: moved to ' .. KEYS[9])
          end
        end
      end
      outcome = 'applied'
    end
  end
  outcomes[#outcomes + 1] = outcome
  if outcome == 'stale' or outcome == 'invalid' then
    allAcked = false
  else
    acked[#acked + 1] = e.raw
    if anyAttempts then rcall('HDEL', KEYS[11], e.eventId) end
  end
end

-- The ack, in the same step as what happened to each message.
if atHead and allAcked then
  rcall('LTRIM', KEYS[1], count, -1)
else
  for _, raw in ipairs(acked) do rcall('LREM', KEYS[1], 1, raw) end
end

if statOk.applied then rcall('HSET', KEYS[6], 'applied', int(applied)) end
for name, n in pairs(counts) do
  if n > 0 and statOk[name] then rcall('HINCRBY', KEYS[6], name, n) end
end
return { outcomes, problems }
