-- slice_giveback.lua: what comes before refund.lua in the give-back of a
-- slice. A bucket's slice may be given back only while it is live in
-- the store's time: a unit given back later than its life after it was
-- spent could be spent again where SEMANTICS.md's bound no longer counts
-- it. So the give-back carries the slice's end (ARGV[10], µs in the time the
-- slice was taken at: the server's, or the caller's) and does nothing from
-- that instant on, replying allowed 0. A window's slice names its window
-- instead (refund.lua) and carries 0.
local deadline = tonumber(ARGV[10])
if deadline > 0 and clock(tonumber(ARGV[7])) >= deadline then
  return {0, 0, 0, 0, 0, 0}
end
