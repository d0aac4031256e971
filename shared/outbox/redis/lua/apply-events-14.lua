--[[
  Applies a batch of events, in order, each at most once and in seq order per aggregate, and acks
  each in the same step: a message leaves the processing list only together with its effects, its
  parking or its dead-lettering. An event's effects are data the handler returned (hincrby, hset,
  hdel, sadd, srem, zincrby, set on keys under the namespace); the script knows nothing of what
  they mean. Redis does not roll a script back, so the script reads and checks everything first
  (phase 1: the outcome of every event, and every effect against the state the events before it in
  this call leave) and writes only after that (phase 2); nothing in phase 2 can fail on the data it
  finds. Bad state it meets (a key of another type, a non-integer where hincrby adds, a result out
  of range, a project key) is reported, and that event is left in the processing list with none of
  its effects applied.

  Input:
    KEYS[1]  processing list the messages were moved to (the ack removes them from it)
    KEYS[2]  processed hash (event_id -> JSON result)
    KEYS[3]  applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    KEYS[4]  parked hash ("<aggregate>:<seq>" -> JSON {reason, message, parkedAt})
    KEYS[5]  stats hash (applied, duplicates, parked, unparked, dead)
    KEYS[6]  event queue (an applied event's parked successors are pushed back to its head, in seq order)
    KEYS[7]  meta hash; its field 'store' names the store this Redis serves; a call that meets a
             taken seq records the event in 'takenEvent', 'takenAggregate', 'takenSeq', 'takenAt'
    KEYS[8]  dead-letter list (a message of another store, or a corrupt parked entry, goes there)
    KEYS[9]  apply-count hash (event_id -> times its effects were applied: the evidence verify reads)
    KEYS[10] attempts hash (event_id -> failed handler attempts): an acked event's entry goes
    KEYS[11] effect-keys set: every key an effect wrote (full name), added in the same step, so that
             a Redis that lost its meta hash but kept effects can have them deleted before every
             event is applied again (claim-store-10.lua)
    KEYS[12] applied log (list): `t<appliedAt>` then `e<event_id>` per event applied, for the
             dedupe window's sweep (sweep-window-5.lua)
    KEYS[13] window hash: its 'sweptThrough' tells a record the sweep dropped from a taken seq, its
             'droppedThrough' a guard the aggregate horizon dropped from a gap
    KEYS[14] aggregate log (list), with an aggregate horizon: `t<appliedAt>` then `a<seq> <aggregate>`
             per event applied, for the horizon's sweep (sweep-horizon-3.lua)

    ARGV[1] dedupe marker key prefix; the marker of an event is <prefix><event_id>
    ARGV[2] dedupe marker TTL in seconds (0 = never expires)
    ARGV[3] namespace key prefix ('' for none): an effect's key is <prefix><key>
      (Marker and effect keys are derived, not declared: like the rest of this project, the script
      expects one Redis, not a Cluster.)
    ARGV[4] the aggregate horizon, ms ('0': none): with one, applied events go to the aggregate log
    ARGV[5] the events, one flat JSON array of strings, per event in order: event_id, aggregate
      key, seq (an integer), store id of the message, processed value (a JSON object, to which the
      script adds "applyOrder", the stats hash's 'applied' counter, and "appliedAt"), its commit
      time (ms, '0' when unknown), its aggregate's previous event's commit time (ms, '0' when not
      kept, '-1' when unknown), the number n of its effects (an integer), then n times: op, key
      (relative to the namespace), field or member ('' for set), value ('' for hdel, srem; the
      increment for hincrby, zincrby)
    ARGV[6] ... one per event, in the same order: the raw message exactly as it sits in the
      processing list
      (One JSON argument rather than one argument per value: a client pays for every argument.
      Flat rather than an array per event and per effect: the decoder then makes one table, not three per event.)

  Time: appliedAt, parkedAt and deadAt are Redis's clock (TIME, ms since epoch) when the script
  runs, i.e. when the event was applied, not when the consumer built the call. (TIME is allowed in
  a script that writes: Redis >= 5 replicates a script's effects, not the script.)

  Output: { outcomes, problems }
    outcomes, one letter per event, in order (one string: a reply of one value per event costs
    both sides more), the letter being the first of:
      'invalid'   its seq is not an integer, an effect is refused, or Redis holds bad state it would
                  need (see problems): nothing done, the message stays in the processing list
      'stale'     the message was not in the processing list (already acked, e.g. a re-sent call): nothing done
      'foreign'   the message comes from another store than the one this Redis serves (or Redis serves
                  none: it lost its state): acked and dead-lettered with the reason, no effect
      'duplicate' seen before (dedupe marker, processed entry, or seq <= last applied): acked, no effect.
                  One past the seq guard whose processed entry shows it applied (the applied seq was
                  lost) puts the seq guard back at its seq and re-queues its parked successors, as
                  an applied one does.
                  One behind the seq guard with no processed entry, no marker and no apply count,
                  committed after the window's sweeps reached, was never applied: another event
                  took its seq (the store that sent it went back in time, e.g. restored from an
                  older backup). It is acked as a duplicate all the same, and recorded in the meta hash (KEYS[7], 'taken…'), where the relay, status
                  and prune look (store-pairing.ts) if the store holds that event
      'parked'    seq > last applied + 1: acked and parked until the gap is filled
      'applied'   effects applied, counted, recorded in processed, acked; its parked successors (seq + 1,
                  seq + 2, … up to 256) are re-queued at the head of the queue, in seq order
    problems: one line per piece of bad state met (empty when none)
]]
-- (Written for the common case's cost: per event, parallel arrays rather than a table, one
-- redis.call (its dedupe marker) and a few table look-ups; the rest is one call per hash.)
local rcall, type, tonumber, unpack = redis.call, type, tonumber, unpack
local find, sub, fmt = string.find, string.sub, string.format
local prefix, ttlText, namespace = ARGV[1], ARGV[2], ARGV[3]

-- Integers as Redis stores them (no leading zeros, no '+'): exact in a Lua number up to 2^53, printed back with %d.
local MAX_EXACT = 9007199254740991
local function integer(text)
  if type(text) ~= 'string' or not (text == '0' or find(text, '^%-?[1-9]%d*$')) then return nil end
  local n = tonumber(text)
  if not n or n > MAX_EXACT or n < -MAX_EXACT then return nil end
  return n
end
local function int(n) return fmt('%d', n) end
-- The small integers by their text: the usual seqs and effect counts are read with one look-up.
local SMALL = {}
for n = 0, 63 do SMALL[int(n)] = n end

local ttl = integer(ttlText)
if not ttl or ttl < 0 or not namespace then
  return redis.error_reply('apply-events: ttl must be a whole number of seconds (0 or more) and the namespace prefix given')
end

-- Variadic commands take their arguments in slices: Lua's stack limits unpack. `step` values a call.
local SLICE = 1000
local function inSlices(command, key, values, step)
  for first = 1, #values, step do
    rcall(command, key, unpack(values, first, math.min(first + step - 1, #values)))
  end
end
-- HMGET of `fields` (sliced), the values in the same order (false when missing). With `call`
-- redis.pcall, nil when it fails.
local function hmget(key, fields, call)
  if #fields <= SLICE then
    if #fields == 0 then return {} end
    local values = (call or rcall)('HMGET', key, unpack(fields))
    if values.err then return nil end
    return values
  end
  local all = {}
  for first = 1, #fields, SLICE do
    local values = (call or rcall)('HMGET', key, unpack(fields, first, math.min(first + SLICE - 1, #fields)))
    if values.err then return nil end
    for i = 1, #values do all[#all + 1] = values[i] end
  end
  return all
end

-- The events, read before anything else: a call that does not add up changes nothing.
local BAD_EVENTS = 'apply-events: ARGV[5] must be a flat JSON array of strings, per event event_id, aggregate, seq, store, processed, '
  .. 'the number n of its effects, then n times op, key, field, value; then one raw message per event'
local decoded, flat = pcall(cjson.decode, ARGV[5] or '')
if not decoded or type(flat) ~= 'table' or (#flat == 0 and next(flat) ~= nil) then
  return redis.error_reply(BAD_EVENTS)
end
-- Event i's values start at flat[at[i]]: event_id, aggregate, seq text, store, processed, commit
-- time, previous commit time, n, then its effects, 4 values each; its raw message is ARGV[5 + i]. What the script finds out about it
-- is kept in arrays by i.
local at, seqOf, kindOf = {}, {}, {}
local count, size = 0, #flat
-- Walks the events; false when they do not add up. A value that is not a string raises an error
-- (caught below): `#` refuses a number, a boolean or null, `.. ''` a table; two operators per
-- value rather than a call of type().
local function walk()
  local pos = 1
  while pos <= size do
    local last = pos + 7
    for k = pos, last do
      local v = flat[k]
      local _ = #v
      v = v .. ''
    end
    local n = SMALL[flat[last]] or integer(flat[last])
    if not n or n < 0 then return false end
    last = last + 4 * n
    if last > size then return false end
    for k = pos + 8, last do
      local v = flat[k]
      local _ = #v
      v = v .. ''
    end
    count = count + 1
    at[count], seqOf[count], kindOf[count] = pos, SMALL[flat[pos + 2]] or integer(flat[pos + 2]) or false, false
    pos = last + 1
  end
  return true
end
local walked, added = pcall(walk)
if not walked or not added or #ARGV ~= 5 + count then return redis.error_reply(BAD_EVENTS) end

local clock = rcall('TIME')
local now = int(tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))

local problems = {}
local function problem(text) problems[#problems + 1] = text end

-- The keys phase 2 may write without having read them first: a key of another type would fail
-- there, after other writes. (processed, applied-seq and stats are read by HMGET below; apply-count
-- is written through a fallback that reports instead.)
--- @include "includes/key-types.lua"
local wrongType = wrongKeyType('apply-events', {
  { KEYS[4], 'hash' }, { KEYS[6], 'list' }, { KEYS[8], 'list' }, { KEYS[10], 'hash' }, { KEYS[11], 'set' }, { KEYS[12], 'list' }, { KEYS[14], 'list' },
}, 'nothing applied')
if wrongType then return wrongType end
--- @include "includes/guards.lua"

-- Phase 1: read and check. No write happens before it ends.
local served = rcall('HGET', KEYS[7], 'store')
local STATS = { 'applied', 'duplicates', 'parked', 'unparked', 'dead' }
local statValues = rcall('HMGET', KEYS[5], unpack(STATS))
local statOk = {}
for i, name in ipairs(STATS) do
  local value = statValues[i]
  statOk[name] = not value or integer(value) ~= nil
  if not statOk[name] then problem(KEYS[5] .. ' field ' .. name .. ' holds "' .. value .. '", not an integer') end
end
local applied = statOk.applied and (integer(statValues[1] or '0')) or nil

-- Usually the batch is exactly the head of the processing list, in order: then one LTRIM acks it all.
local atHead = false
if count > 0 then
  local head = rcall('LRANGE', KEYS[1], 0, count - 1)
  atHead = #head == count
  for i = 1, count do
    if not atHead or head[i] ~= ARGV[5 + i] then
      atHead = false
      break
    end
  end
end

-- What Redis will hold once the events checked so far are applied: key types, hash fields (a
-- string, false when absent, or the number a hincrby of this call left), scores. An event's
-- effects change it as they are checked; an undo log takes the changes back when one of them is
-- refused, so a refused event leaves nothing behind (the log is reused: no table per event).
-- A hash field an applied event changed is dirty: phase 2 writes its final value once (HSET or
-- HDEL, one call per key), not each hincrby, hset and hdel that led to it.
local OP_TYPE = { hincrby = 'hash', hset = 'hash', hdel = 'hash', sadd = 'set', srem = 'set', zincrby = 'zset', set = 'string' }
local typeOf, fieldsOf, scoresOf = {}, {}, {}
local dirtyOf, dirtyFieldsOf, dirtyKeys = {}, {}, {}
local undoTable, undoSlot, undoValue, undone = {}, {}, {}, 0
-- An effect's key as given -> its full name, or false for a key effects may not touch.
local fullKeyOf = {}

local function change(tbl, slot, value)
  undone = undone + 1
  undoTable[undone], undoSlot[undone], undoValue[undone] = tbl, slot, tbl[slot]
  tbl[slot] = value
end

-- The table of `key` in `tables` (per key: its fields, scores, dirty marks), made on first use.
local function tableOf(tables, key)
  local t = tables[key]
  if not t then
    t = {}
    tables[key] = t
  end
  return t
end

local function isProjectKey(key)
  return sub(key, 1, 6) == 'outbox' or key == 'processed' or sub(key, 1, 5) == 'bull:'
end

-- Checks one effect against the state so far and records its change; nil when it can be applied, else why not.
local function checkEffect(op, key, field, value)
  local wanted = OP_TYPE[op]
  if not wanted then return 'unknown op' end
  local full = fullKeyOf[key]
  if full == nil then
    full = key ~= '' and not isProjectKey(key) and (namespace == '' and key or namespace .. key)
    fullKeyOf[key] = full
  end
  if not full then return 'not a key effects may touch (outbox*, processed and bull:* are the project\'s)' end
  local t = typeOf[full]
  if t == nil then
    t = rcall('TYPE', full).ok
    typeOf[full] = t
  end
  if t ~= 'none' and t ~= wanted then return 'the key holds a ' .. t .. ', not a ' .. wanted end
  if wanted == 'hash' then
    local fields = fieldsOf[full] or tableOf(fieldsOf, full)
    if op == 'hincrby' then
      local by = SMALL[value] or integer(value)
      if not by then return 'increment "' .. value .. '" is not an integer' end
      local current = fields[field]
      if current == nil then
        current = rcall('HGET', full, field) or false
        fields[field] = current
      end
      local n = current
      if type(n) ~= 'number' then
        n = current and integer(current) or (not current and 0) or nil
        if n == nil then return 'field ' .. field .. ' holds "' .. current .. '", not an integer' end
      end
      local result = n + by
      if result > MAX_EXACT or result < -MAX_EXACT then return 'field ' .. field .. ' would leave the exact integer range' end
      change(fields, field, result)
    else
      -- hdel on a key that does not exist changes nothing: not marked, so that phase 2 does not HDEL
      -- a key that a later set, sadd or zincrby of this call makes another type.
      if op == 'hdel' and t == 'none' then return nil end
      change(fields, field, op == 'hset' and value or false)
    end
    local dirty = dirtyOf[full]
    if not dirty then
      dirty = {}
      dirtyOf[full], dirtyFieldsOf[full] = dirty, {}
      dirtyKeys[#dirtyKeys + 1] = full
    end
    if dirty[field] == nil then
      -- Listed once (false until an applied event makes it true): an undo sets it back to false.
      dirty[field] = false
      local listed = dirtyFieldsOf[full]
      listed[#listed + 1] = field
    end
    change(dirty, field, true)
  elseif op == 'zincrby' then
    -- (Lua's tonumber takes surrounding whitespace, ZINCRBY does not.)
    local by = not find(value, '^%s') and not find(value, '%s$') and tonumber(value)
    if not by or by ~= by or by == math.huge or by == -math.huge then return 'increment "' .. value .. '" is not a finite number' end
    local scores = tableOf(scoresOf, full)
    local current = scores[field]
    if current == nil then
      local score = rcall('ZSCORE', full, field)
      current = score and tonumber(score) or 0
      scores[field] = current
    end
    local result = current + by
    if result ~= result then return 'member ' .. field .. ' would get a score that is not a number' end
    change(scores, field, result)
  end
  -- srem and hdel never create a key; the others do, with the op's type. (Nor is a key that hdel or
  -- srem may have emptied taken as gone: a later effect of another type on it in the same call is
  -- refused, 'invalid', although Redis would have taken it. Rare, and on the safe side.)
  if t == 'none' and op ~= 'srem' and op ~= 'hdel' then change(typeOf, full, wanted) end
  return nil
end

-- Checks an event's effects; nil when all can be applied, else why not (and the state is as before).
local function checkEffects(s)
  undone = 0
  for j = 1, tonumber(flat[s + 7]) do
    local f = s + 4 + 4 * j
    local refused = checkEffect(flat[f], flat[f + 1], flat[f + 2], flat[f + 3])
    if refused then
      for i = undone, 1, -1 do undoTable[i][undoSlot[i]] = undoValue[i] end
      return 'effect ' .. j .. ' of event ' .. flat[s] .. ' (' .. flat[f] .. ' ' .. flat[f + 1] .. '): ' .. refused
    end
  end
  return nil
end

-- First the messages that are gone (stale), of another store (foreign) or without a usable seq.
-- The others are open: their indexes, and their aggregates (repeated: HMGET takes that) in `openAggregates`.
local open, openAggregates = {}, {}
local present = {}
for i = 1, count do
  local s = at[i]
  if not atHead then
    -- Not at the head: each message must still be in the list (a re-sent call finds it gone).
    local raw = ARGV[5 + i]
    if present[raw] == nil then present[raw] = #rcall('LPOS', KEYS[1], raw, 'COUNT', 0) end
    if present[raw] > 0 then
      present[raw] = present[raw] - 1
    else
      kindOf[i] = 'stale'
    end
  end
  if kindOf[i] then
    -- stale: nothing more to check
  elseif flat[s + 3] ~= served then
    kindOf[i] = 'foreign'
  elseif not seqOf[i] or seqOf[i] < 1 or not applied then
    kindOf[i] = 'invalid'
  else
    open[#open + 1] = i
    openAggregates[#openAggregates + 1] = flat[s + 1]
  end
end

-- The state the others need, read in one call per hash rather than one per event: their applied
-- seqs; then, for the events past the seq guard (only those can be new), their processed entries;
-- and whether any of those without one has a dedupe marker (EXISTS of all: usually none has, and
-- then no event needs its own look-up).
local seqValues = readGuards(KEYS[3], openAggregates)
local maybeNew, maybeNewIds = {}, {}
for j = 1, #open do
  local value = seqValues[j]
  local last = value and integer(value) or (not value and 0) or nil
  if last and seqOf[open[j]] > last then
    maybeNew[#maybeNew + 1] = open[j]
    maybeNewIds[#maybeNewIds + 1] = flat[at[open[j]]]
  end
end
local processedValues = hmget(KEYS[2], maybeNewIds)
-- By event index: its processed entry (false when none) and, without one, its marker's key.
local processedOf, markerOf = {}, {}
local markerKeys = {}
for j = 1, #maybeNew do
  local i = maybeNew[j]
  processedOf[i] = processedValues[j]
  if not processedValues[j] then
    local marker = prefix .. maybeNewIds[j]
    markerOf[i] = marker
    markerKeys[#markerKeys + 1] = marker
  end
end
local markersExist = 0
for first = 1, #markerKeys, SLICE do
  markersExist = markersExist + rcall('EXISTS', unpack(markerKeys, first, math.min(first + SLICE - 1, #markerKeys)))
end

-- The last applied seq to take for an event whose aggregate has no guard: 0, the seq before it
-- when its predecessor was committed before the horizon's sweeps reached (so, the horizon being
-- longer than any delivery, applied before its guard was dropped), or nil when the event itself
-- was committed before then (a duplicate: see docs/dedupe-window.md).
local droppedThrough
local function guardWhenAbsent(i)
  droppedThrough = droppedThrough or tonumber(redis.pcall('HGET', KEYS[13], 'droppedThrough') or '0') or 0
  local s = at[i]
  local createdAt, previous = tonumber(flat[s + 5]) or 0, tonumber(flat[s + 6]) or -1
  if droppedThrough == 0 or createdAt == 0 or seqOf[i] == 1 and createdAt > droppedThrough then return 0 end
  if createdAt <= droppedThrough then return nil end
  if previous >= 0 and previous <= droppedThrough then return seqOf[i] - 1 end
  return 0
end

-- By aggregate: its last applied seq so far, false when its field is not an integer.
local lastOf, seenNow, behindGuard = {}, {}, {}
local restoreSeqOf, expectedOf = {}, {}
local toApply = {}
for j = 1, #open do
  local i = open[j]
  local s = at[i]
  local aggregate, seq = flat[s + 1], seqOf[i]
  local last = lastOf[aggregate]
  local pastHorizon = false
  if last == nil then
    local value = seqValues[j]
    if value then
      last = integer(value) or false
      if not last then problem(guardKey(KEYS[3], aggregate) .. ' field ' .. aggregate .. ' holds "' .. value .. '", not an integer') end
    else
      last = guardWhenAbsent(i)
    end
    pastHorizon = last == nil
    if not pastHorizon then lastOf[aggregate] = last end
  end
  if pastHorizon then
    -- Committed before the horizon's sweeps reached and its aggregate's guard is gone: applied.
    kindOf[i] = 'duplicate'
  elseif not last then
    kindOf[i] = 'invalid'
  elseif seq <= last or seenNow[flat[s]] then
    -- Behind the seq guard, or seen in this call: a duplicate without asking Redis; one behind the
    -- guard is checked below for a taken seq.
    kindOf[i] = 'duplicate'
    if not seenNow[flat[s]] then behindGuard[#behindGuard + 1] = i end
  else
    -- (An event that gets here was past the seq guard before this call: its entry was read above.)
    local processed = processedOf[i]
    if processed == nil then processed = rcall('HEXISTS', KEYS[2], flat[s]) == 1 end
    if processed then
      -- Applied before, but its applied seq was lost: put the seq guard back.
      kindOf[i] = 'duplicate'
      restoreSeqOf[i] = true
      lastOf[aggregate] = seq
    elseif markersExist > 0 and rcall('EXISTS', markerOf[i] or prefix .. flat[s]) == 1 then
      kindOf[i] = 'duplicate'
    end
  end
  if kindOf[i] then
    -- duplicate or invalid: decided above
  elseif seq > last + 1 then
    kindOf[i] = 'parked'
    expectedOf[i] = last + 1
  else
    local refused = checkEffects(s)
    if refused then
      problem(refused)
      kindOf[i] = 'invalid'
    else
      kindOf[i] = 'apply'
      lastOf[aggregate] = seq
      seenNow[flat[s]] = true
      toApply[#toApply + 1] = flat[s]
    end
  end
end

-- Of the duplicates behind the seq guard, the first never applied (no processed entry, apply count
-- or marker): its seq was taken by another event. Usually they all have their processed entry.
-- An event committed before the window's sweeps reached may have had its records swept: not taken.
local taken
if #behindGuard > 0 then
  local ids = {}
  for j = 1, #behindGuard do ids[j] = flat[at[behindGuard[j]]] end
  local entries = hmget(KEYS[2], ids)
  local sweptThrough
  for j = 1, #behindGuard do
    if not entries[j] then
      sweptThrough = sweptThrough or tonumber(redis.pcall('HGET', KEYS[13], 'sweptThrough') or '0') or 0
      local swept = sweptThrough > 0 and (tonumber(flat[at[behindGuard[j]] + 5]) or 0) <= sweptThrough
      local id = ids[j]
      -- (pcall: an apply-count hash of another type is reported elsewhere, not an error here.)
      if not swept and redis.pcall('HEXISTS', KEYS[9], id) == 0 and rcall('EXISTS', prefix .. id) == 0 then
        taken = behindGuard[j]
        break
      end
    end
  end
end

-- The apply counts of the events to apply, read in one call. When that hash or a count in it is
-- not what the script writes, each count is kept as before: HINCRBY per event, its failure reported.
-- (countValues follows toApply, the events applied, in order.)
local countValues = {}
if #toApply > 0 then countValues = hmget(KEYS[9], toApply, redis.pcall) end
if countValues then
  for k = 1, #toApply do
    if countValues[k] and not integer(countValues[k]) then
      countValues = nil
      break
    end
  end
end

-- Phase 2: write. Every value used below was checked above.
local counts = { duplicates = 0, parked = 0, unparked = 0, dead = 0 }
local anyParked = rcall('EXISTS', KEYS[4]) == 1
-- Failed handler attempts are rare too: only while some are counted does an ack clear its entry.
local anyAttempts = rcall('EXISTS', KEYS[10]) == 1
local outcomes = {}
local allAcked = true
-- Written after the loop, one call per hash: processed entries, applied seqs, apply counts, cleared attempts.
local processedPairs, seqPairs, countPairs, attemptsDone = {}, {}, {}, {}
local markerTtl = ttl > 0

--- @include "includes/dead-letter.lua"

--- @include "includes/unpark-successors.lua"

local touched, touchedList = {}, {}
-- An event's effects other than on hash fields (those are written once, after the loop).
local function applyEffects(s)
  for f = s + 8, s + 4 + 4 * tonumber(flat[s + 7]), 4 do
    local op, field, value = flat[f], flat[f + 2], flat[f + 3]
    local key = fullKeyOf[flat[f + 1]]
    if not touched[key] then
      touched[key] = true
      touchedList[#touchedList + 1] = key
    end
    if op == 'sadd' then rcall('SADD', key, field)
    elseif op == 'srem' then rcall('SREM', key, field)
    elseif op == 'zincrby' then rcall('ZINCRBY', key, value, field)
    elseif op == 'set' then rcall('SET', key, value) end
  end
end

local applying = 0
for i = 1, count do
  local s = at[i]
  local kind = kindOf[i]
  local outcome
  if kind == 'apply' then
    applying = applying + 1
    local eventId, seqText = flat[s], flat[s + 2]
    applied = applied + 1
    local marker = markerOf[i] or prefix .. eventId
    if markerTtl then
      rcall('SET', marker, '1', 'EX', ttlText)
    else
      rcall('SET', marker, '1')
    end
    applyEffects(s)
    local n = #processedPairs
    processedPairs[n + 1] = eventId
    processedPairs[n + 2] = sub(flat[s + 4], 1, -2) .. ',"applyOrder":' .. int(applied) .. ',"appliedAt":' .. now .. '}'
    n = #seqPairs
    seqPairs[n + 1] = flat[s + 1]
    seqPairs[n + 2] = seqText
    -- The count is evidence, not a condition: a field holding a non-number is reported, and
    -- pcall keeps its error from aborting the script after the writes above.
    local times
    if countValues then
      local before = countValues[applying]
      times = before and integer(before) + 1 or 1
      n = #countPairs
      countPairs[n + 1] = eventId
      countPairs[n + 2] = times == 1 and '1' or int(times)
    else
      times = redis.pcall('HINCRBY', KEYS[9], eventId, 1)
    end
    if type(times) == 'table' then
      problem(KEYS[9] .. ' field ' .. eventId .. ' holds a non-integer: this application was not counted')
    elseif times > 1 then
      problem('event ' .. eventId .. ' was applied more than once (its processed entry had been removed)')
    end
    if anyParked then
      rcall('HDEL', KEYS[4], flat[s + 1] .. ':' .. seqText)
      unparkSuccessors(flat[s + 1], seqOf[i])
    end
    outcome = 'a'
  elseif kind == 'duplicate' then
    -- Seen before: by its marker, by its processed entry (even with the marker and the applied
    -- seq gone), or by the seq guard.
    if anyParked then rcall('HDEL', KEYS[4], flat[s + 1] .. ':' .. flat[s + 2]) end
    if restoreSeqOf[i] then
      seqPairs[#seqPairs + 1] = flat[s + 1]
      seqPairs[#seqPairs + 1] = flat[s + 2]
      -- Its successors parked while the seq guard was lost wait for this seq: released as an applied event's are.
      if anyParked then unparkSuccessors(flat[s + 1], seqOf[i]) end
    end
    counts.duplicates = counts.duplicates + 1
    outcome = 'd'
  elseif kind == 'stale' or kind == 'invalid' then
    outcome = kind == 'stale' and 's' or 'i'
    allAcked = false
  elseif kind == 'foreign' then
    deadLetterForeign(flat[s + 3], served, ARGV[5 + i])
    outcome = 'f'
  else
    -- parked: not applied, so no dedupe marker: its redelivery has to be applied later.
    local reason = 'gap: expected seq ' .. int(expectedOf[i]) .. ', got ' .. flat[s + 2]
    rcall('HSET', KEYS[4], flat[s + 1] .. ':' .. flat[s + 2], cjson.encode({ reason = reason, message = ARGV[5 + i], parkedAt = tonumber(now) }))
    anyParked = true
    counts.parked = counts.parked + 1
    outcome = 'p'
  end
  outcomes[i] = outcome
  if anyAttempts and outcome ~= 's' and outcome ~= 'i' then attemptsDone[#attemptsDone + 1] = flat[s] end
end

if taken then
  local s = at[taken]
  rcall('HSET', KEYS[7], 'takenEvent', flat[s], 'takenAggregate', flat[s + 1], 'takenSeq', flat[s + 2], 'takenAt', now)
end

inSlices('HSET', KEYS[2], processedPairs, 2 * SLICE)
writeGuards(KEYS[3], KEYS[13], seqPairs)
inSlices('HSET', KEYS[9], countPairs, 2 * SLICE)
inSlices('HDEL', KEYS[10], attemptsDone, SLICE)

-- The hash fields the applied events changed, each at its final value: one HSET and one HDEL per key.
for _, key in ipairs(dirtyKeys) do
  local dirty, fields, sets, deletes = dirtyOf[key], fieldsOf[key], {}, {}
  for _, field in ipairs(dirtyFieldsOf[key]) do
    if dirty[field] then
      local value = fields[field]
      if value then
        sets[#sets + 1] = field
        sets[#sets + 1] = type(value) == 'number' and int(value) or value
      else
        deletes[#deletes + 1] = field
      end
    end
  end
  inSlices('HSET', key, sets, 2 * SLICE)
  inSlices('HDEL', key, deletes, SLICE)
end

-- The keys effects wrote, recorded with them.
inSlices('SADD', KEYS[11], touchedList, SLICE)

-- The applied events in the log the window's sweep reads, after the time they were applied; with a
-- horizon, their aggregates and seqs in the log its sweep reads.
if #toApply > 0 then
  local logged = { 't' .. now }
  for k = 1, #toApply do logged[k + 1] = 'e' .. toApply[k] end
  inSlices('RPUSH', KEYS[12], logged, SLICE)
  if ARGV[4] ~= '0' then
    local aggregates = { 't' .. now }
    for k = 1, #seqPairs, 2 do aggregates[#aggregates + 1] = 'a' .. seqPairs[k + 1] .. ' ' .. seqPairs[k] end
    inSlices('RPUSH', KEYS[14], aggregates, SLICE)
  end
end

-- The ack, in the same step as what happened to each message.
if atHead and allAcked then
  if count > 0 then rcall('LTRIM', KEYS[1], count, -1) end
else
  for i = 1, count do
    if kindOf[i] ~= 'stale' and kindOf[i] ~= 'invalid' then rcall('LREM', KEYS[1], 1, ARGV[5 + i]) end
  end
end

if statOk.applied and #toApply > 0 then rcall('HSET', KEYS[5], 'applied', int(applied)) end
for name, n in pairs(counts) do
  if n > 0 and statOk[name] then rcall('HINCRBY', KEYS[5], name, n) end
end
return { table.concat(outcomes), problems }
