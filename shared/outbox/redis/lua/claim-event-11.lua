--[[
  Database mode, step 1 of 2 (complete-event-12.lua is step 2): claims events before their handlers
  run in the consumer's own database. The checks are apply-events-14.lua's (processed, seq guard,
  gap), then the event's dedupe marker is taken as a lease: SET with a TTL, holding
  "claim:<owner>", so that a claim whose process died expires and the event is retried. The effect
  itself is made once by the consumer database's inbox table, not here. Everything is read and
  checked before the first write (Redis does not roll a script back).

  The caller sends at most one event per aggregate per call (seq n+1 cannot be claimed before seq n
  is completed: it would be parked).

  Input: the first ten keys of complete-event-12.lua, in its order
    KEYS[1]  processing list the messages were moved to (an ack removes them from it)
    KEYS[2]  processed hash (event_id -> JSON result)
    KEYS[3]  applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    KEYS[4]  parked hash ("<aggregate_id>:<seq>" -> JSON {reason, message, parkedAt})
    KEYS[5]  stats hash (duplicates, parked, unparked, dead)
    KEYS[6]  event queue (the parked successors of a duplicate that puts the seq guard back are
             pushed back to its head, in seq order)
    KEYS[7]  meta hash; its field 'store' names the store this Redis serves
    KEYS[8]  dead-letter list (a message of another store goes there)
    KEYS[9]  apply-count hash (event_id -> times its effect was recorded; complete-event-12.lua
             writes it): read only, to tell a duplicate that was applied from one whose seq another
             event took
    KEYS[10] attempts hash (event_id -> failed handler attempts): an acked event's entry goes
    KEYS[11] window hash: its 'sweptThrough' tells a record the dedupe window's sweep dropped from
             a taken seq (complete-event-12.lua's KEYS[11] is the applied log)

    ARGV[1] dedupe marker key prefix; the marker of an event is <prefix><event_id>
    ARGV[2] lease in ms (an integer >= 1): the claim marker's TTL
    ARGV[3] owner: this consumer process's claim token (its own claims it may take again at once)
    then 6 values per event, from ARGV[4]:
      raw message exactly as it sits in the processing list, event_id, aggregate_id, seq, store id,
      commit time (ms, '0' when unknown)

  Output: { outcomes, waits, problems }
    outcomes, one per event, in order:
      'claimed'   the marker now holds this owner's claim for the lease: run the handler, then complete
      'busy'      another owner's claim holds it (its lease has waits[i] ms left): nothing done, the
                  message stays in the processing list
      'duplicate' seen before (completed marker, processed entry, or seq <= last applied): acked.
                  One past the seq guard with a processed entry was completed before its
                  aggregate's applied seq was lost: it puts the guard back at its seq and releases
                  its parked successors (up to 256, to the queue's head in seq order), as its
                  completion did.
                  One behind the seq guard that was never claimed nor completed (no processed
                  entry, no apply count, no marker), committed after the window's sweeps reached, had its seq taken by another event, as after a
                  store restored from an older copy: it is still acked, and the first such event
                  of the call is recorded in the meta hash (KEYS[7]: 'takenEvent', 'takenAggregate',
                  'takenSeq', 'takenAt'), as apply-events-14.lua does, where the relay, status and
                  prune look for it (store-pairing.ts)
      'parked'    seq > last applied + 1: acked and parked until the gap is filled
      'foreign'   from another store than the one this Redis serves: acked and dead-lettered
      'stale'     the message was not in the processing list: nothing done
      'invalid'   its seq is not an integer, or Redis holds bad state it needs (see problems):
                  nothing done, the message stays in the processing list
    waits: per event, the ms left of the lease that made it 'busy' (0 otherwise)
    problems: one line per piece of bad state met
]]
local rcall = redis.call
local prefix, lease, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local FIELDS = 6
local FIRST = 4
local count = (#ARGV - FIRST + 1) / FIELDS
if not lease or lease < 1 or lease ~= math.floor(lease) or count ~= math.floor(count) or owner == '' then
  return redis.error_reply('claim-event: lease must be a whole number of ms >= 1, owner non-empty, and each event needs 5 values')
end
local CLAIM = 'claim:' .. owner

--- @include "includes/guards.lua"
--- @include "includes/claim-checks.lua"

-- The keys phase 2 may write without having read them first: a key of another type would fail
-- there, after other writes (an ack). The others are read in phase 1; apply-count only with pcall.
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('claim-event', { { KEYS[4], 'hash' }, { KEYS[6], 'list' }, { KEYS[8], 'list' }, { KEYS[10], 'hash' } }, 'nothing claimed')
if wrongType then return wrongType end

-- Phase 1: read and check.
local served = rcall('HGET', KEYS[7], 'store')
local STATS = { 'duplicates', 'parked', 'unparked', 'dead' }
local statValues, statOk = readStats(STATS)

local plan = {}
-- The first event of the call met behind the seq guard that was never applied (see 'duplicate').
local taken, countsUnread, sweptThrough
for i = 0, count - 1 do
  local base = FIRST + i * FIELDS
  local e = { raw = ARGV[base], eventId = ARGV[base + 1], aggregate = ARGV[base + 2], seqText = ARGV[base + 3], store = ARGV[base + 4] }
  e.createdAt = tonumber(ARGV[base + 5]) or 0
  e.seq = integer(e.seqText)
  checkEvent(e, true, served)
  if e.kind == 'candidate' then
    e.marker = rcall('GET', prefix .. e.eventId)
    -- Behind the guard with no processed entry and no marker: was it ever completed? (pcall: an
    -- apply-count hash of another type is a problem line, not an error that stops the claims.)
    if not e.processed and not e.marker and e.seq <= lastOf[e.aggregate] and not taken then
      sweptThrough = sweptThrough or tonumber(redis.pcall('HGET', KEYS[11], 'sweptThrough') or '0') or 0
    end
    if not e.processed and not e.marker and e.seq <= lastOf[e.aggregate] and not taken
      and not (sweptThrough > 0 and e.createdAt <= sweptThrough) then
      local counted = redis.pcall('HEXISTS', KEYS[9], e.eventId)
      if type(counted) == 'table' then
        countsUnread = true
      elseif counted == 0 then
        taken = e
      end
    end
  end
  plan[#plan + 1] = e
end

if countsUnread then
  problem(KEYS[9] .. ' is not a hash: a duplicate behind the seq guard could not be told from an event at a seq another event took')
end

-- Phase 2: write. Every value used below was checked above.
local counts = { duplicates = 0, parked = 0, unparked = 0, dead = 0 }
local anyParked = rcall('EXISTS', KEYS[4]) == 1
local outcomes, waits = {}, {}

--- @include "includes/dead-letter.lua"

--- @include "includes/unpark-successors.lua"

for _, e in ipairs(plan) do
  local outcome, wait = e.kind, 0
  local acked = false
  if e.kind == 'foreign' then
    deadLetterForeign(e.store, served, e.raw)
    acked = true
  elseif e.kind == 'candidate' then
    local seenKey = prefix .. e.eventId
    local last = lastOf[e.aggregate]
    local parkedField = e.aggregate .. ':' .. e.seqText
    local claimedByOther = e.marker and e.marker ~= '1' and e.marker ~= CLAIM
    if e.processed or e.seq <= last or e.marker == '1' then
      -- Seen before ('1' is the marker a completed or applied event keeps).
      if anyParked then rcall('HDEL', KEYS[4], parkedField) end
      if e.processed and e.seq > last then
        -- Completed before, but its applied seq was lost: put the seq guard back, and release
        -- the successors parked meanwhile, which wait for this seq (as its completion did).
        lastOf[e.aggregate] = e.seq
        writeGuards(KEYS[3], KEYS[11], { e.aggregate, e.seqText })
        if anyParked then unparkSuccessors(e.aggregate, e.seq) end
      end
      counts.duplicates = counts.duplicates + 1
      outcome, acked = 'duplicate', true
    elseif claimedByOther then
      -- Its handler may be running (or its process died): the lease decides when it may be retried.
      outcome, wait = 'busy', math.max(0, rcall('PTTL', seenKey))
    elseif e.seq > last + 1 then
      if e.marker == CLAIM then rcall('DEL', seenKey) end
      local reason = 'gap: expected seq ' .. int(last + 1) .. ', got ' .. e.seqText
      rcall('HSET', KEYS[4], parkedField, cjson.encode({ reason = reason, message = e.raw, parkedAt = tonumber(now) }))
      anyParked = true
      counts.parked = counts.parked + 1
      outcome, acked = 'parked', true
    else
      rcall('SET', seenKey, CLAIM, 'PX', lease)
      outcome = 'claimed'
    end
  end
  if acked then ack(e) end
  outcomes[#outcomes + 1] = outcome
  waits[#waits + 1] = wait
end

for name, n in pairs(counts) do
  if n > 0 and statOk[name] then rcall('HINCRBY', KEYS[5], name, n) end
end
if taken then
  rcall('HSET', KEYS[7], 'takenEvent', taken.eventId, 'takenAggregate', taken.aggregate, 'takenSeq', taken.seqText, 'takenAt', now)
end
return { outcomes, waits, problems }
