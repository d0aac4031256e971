--[[
  Database mode, step 2 of 2 (claim-event-11.lua is step 1): records events whose effect the
  consumer's own database has committed (with its inbox row), and acks each in the same step:
  processed, applied seq, apply count, stats, the ack, a parked successor re-queued, and the dedupe
  marker turned from a claim into the completed marker. Idempotent: an event already processed is
  only acked. Everything is read and checked before the first write (Redis does not roll back).

  Input:
    KEYS[1]  processing list holding the messages
    KEYS[2]  processed hash (event_id -> JSON result)
    KEYS[3]  applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    KEYS[4]  parked hash ("<aggregate_id>:<seq>" -> JSON {reason, message, parkedAt})
    KEYS[5]  stats hash (applied, duplicates, unparked, dead)
    KEYS[6]  event queue (a completed event's parked successors are pushed back to its head, in seq order)
    KEYS[7]  meta hash; its field 'store' names the store this Redis serves
    KEYS[8]  dead-letter list
    KEYS[9]  apply-count hash (event_id -> times its effect was recorded: the evidence verify reads)
    KEYS[10] attempts hash (event_id -> failed handler attempts): a completed event's entry goes
    KEYS[11] applied log (list): `t<appliedAt>` then `e<event_id>` per event recorded, for the
             dedupe window's sweep (sweep-window-5.lua); claim-event-11.lua's KEYS[11] differs
    KEYS[12] window hash (its 'guards' counts the seq guards)

    ARGV[1] dedupe marker key prefix; the marker of an event is <prefix><event_id>
    ARGV[2] dedupe marker TTL in seconds (0 = never expires)
    then 6 values per event, from ARGV[3]:
      raw message exactly as it sits in the processing list, event_id, aggregate_id, seq, store id,
      processed value (a JSON object, to which the script adds "applyOrder" and "appliedAt")

  Output: { outcomes, problems }
    outcomes, one per event, in order:
      'applied'   recorded, counted, acked; its parked successors (up to 256) are re-queued at the head, in seq order
      'duplicate' already processed (another consumer completed it): acked only
      'foreign'   Redis now serves another store: acked and dead-lettered (the effect stays in the
                  consumer's database, where its inbox row makes a redelivery a no-op)
      'stale'     the message was not in the processing list: nothing done
      'invalid'   its seq is not an integer, Redis holds bad state it needs, or its aggregate's
                  applied seq went back since the claim and its marker is gone (a Redis rebuilt
                  meanwhile): nothing done, the message stays in the processing list (its
                  redelivery finds the inbox row)
    problems: one line per piece of bad state met
]]
local rcall = redis.call
local prefix, ttl = ARGV[1], tonumber(ARGV[2])
local FIELDS = 6
local FIRST = 3
local count = (#ARGV - FIRST + 1) / FIELDS
if not ttl or ttl < 0 or count ~= math.floor(count) then
  return redis.error_reply('complete-event: ttl must be a number >= 0 and each event needs 6 values')
end

--- @include "includes/guards.lua"
--- @include "includes/claim-checks.lua"

-- The keys phase 2 may write without having read them first: a key of another type would fail
-- there, after other writes (an ack, an applied seq). processed, applied-seq, stats and meta are
-- read in phase 1; apply-count is counted with pcall, its failure reported.
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('complete-event', {
  { KEYS[4], 'hash' }, { KEYS[6], 'list' }, { KEYS[8], 'list' }, { KEYS[10], 'hash' }, { KEYS[11], 'list' },
}, 'nothing completed')
if wrongType then return wrongType end

-- Phase 1: read and check.
local served = rcall('HGET', KEYS[7], 'store')
local STATS = { 'applied', 'duplicates', 'unparked', 'dead' }
local statValues, statOk = readStats(STATS)
local applied = statOk.applied and integer(statValues[1] or '0') or nil

local plan = {}
for i = 0, count - 1 do
  local base = FIRST + i * FIELDS
  local e = { raw = ARGV[base], eventId = ARGV[base + 1], aggregate = ARGV[base + 2], seqText = ARGV[base + 3], store = ARGV[base + 4], result = ARGV[base + 5] }
  e.seq = integer(e.seqText)
  -- (A stats field applied that is not an integer makes every event invalid: its problem line says so.)
  checkEvent(e, applied ~= nil, served)
  if e.kind == 'candidate' and not e.processed and e.seq > lastOf[e.aggregate] + 1 and not rcall('GET', prefix .. e.eventId) then
    -- The claim saw seq = applied seq + 1, and its marker is gone: Redis lost its state since and
    -- was rebuilt from the store, which delivers the events before it again. Recorded now, the
    -- guard would jump them: they would be skipped as duplicates, and taken for events at a seq
    -- another took. Left in the processing list instead: its redelivery is parked behind them,
    -- then finds its inbox row. (With its marker there, only the applied seq went back: recorded
    -- below, as nothing will deliver those events again.)
    e.kind = 'invalid'
    problem('event ' .. e.eventId .. ' completed at seq ' .. e.seqText .. ' while ' .. KEYS[3] .. ' field ' .. e.aggregate .. ' held ' .. int(lastOf[e.aggregate]) .. ': left in the processing list, to wait behind the events before it')
  end
  plan[#plan + 1] = e
end

-- Phase 2: write. Every value used below was checked above.
local counts = { duplicates = 0, unparked = 0, dead = 0 }
local anyParked = rcall('EXISTS', KEYS[4]) == 1
local outcomes = {}

--- @include "includes/dead-letter.lua"

--- @include "includes/unpark-successors.lua"

local logged = { 't' .. now }
for _, e in ipairs(plan) do
  local outcome = e.kind
  local acked = false
  if e.kind == 'foreign' then
    deadLetterForeign(e.store, served, e.raw)
    acked = true
  elseif e.kind == 'candidate' then
    local seenKey = prefix .. e.eventId
    if ttl > 0 then rcall('SET', seenKey, '1', 'EX', ttl) else rcall('SET', seenKey, '1') end
    if e.processed then
      counts.duplicates = counts.duplicates + 1
      outcome = 'duplicate'
    else
      local last = lastOf[e.aggregate]
      if e.seq ~= last + 1 then
        -- The claim saw last + 1 = seq; only a rewritten applied seq moves it past (one behind it
        -- was refused above). The effect is committed in the consumer's database, so it is
        -- recorded all the same.
        problem('event ' .. e.eventId .. ' completed at seq ' .. e.seqText .. ' while ' .. KEYS[3] .. ' field ' .. e.aggregate .. ' held ' .. int(last))
      end
      applied = applied + 1
      if e.seq > last then
        lastOf[e.aggregate] = e.seq
        writeGuards(KEYS[3], KEYS[12], { e.aggregate, e.seqText })
      end
      rcall('HSET', KEYS[2], e.eventId, string.sub(e.result, 1, -2) .. ',"applyOrder":' .. int(applied) .. ',"appliedAt":' .. now .. '}')
      local times = redis.pcall('HINCRBY', KEYS[9], e.eventId, 1)
      if type(times) == 'table' then
        problem(KEYS[9] .. ' field ' .. e.eventId .. ' holds a non-integer: this application was not counted')
      elseif times > 1 then
        problem('event ' .. e.eventId .. ' was recorded more than once (its processed entry had been removed)')
      end
      if anyParked then
        rcall('HDEL', KEYS[4], e.aggregate .. ':' .. e.seqText)
        unparkSuccessors(e.aggregate, e.seq)
      end
      logged[#logged + 1] = 'e' .. e.eventId
      outcome = 'applied'
    end
    acked = true
  end
  if acked then ack(e) end
  outcomes[#outcomes + 1] = outcome
end

if #logged > 1 then rcall('RPUSH', KEYS[11], unpack(logged)) end
if statOk.applied and applied then rcall('HSET', KEYS[5], 'applied', int(applied)) end
for name, n in pairs(counts) do
  if n > 0 and statOk[name] then rcall('HINCRBY', KEYS[5], name, n) end
end
return { outcomes, problems }
