--[[
  Reads the seq guards of many aggregates in one command (verify, status, prune and repair read
  thousands): one reply instead of one per aggregate. Read-only.

  Input:
    KEYS[1] applied-seq key: the base name of the guards' buckets (includes/guards.lua)
    ARGV    the aggregates

  Output: each aggregate's guard, nil where none, in ARGV's order.
]]
--- @include "includes/guards.lua"
return readGuards(KEYS[1], ARGV)
