-- single.lua: one decision on one key.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, debt allowance, cost, max delay
--          (µs, -1 for none), now (µs, -1 for the server's TIME), TTL margin
--          (µs)
-- reply    the decision (see decision in the prelude), or failed(code) (see
--          guard.lua)
local code = guarded_clock(tonumber(ARGV[8]))
if code then
  return failed(code)
end
margin = tonumber(ARGV[9])
return guarded(steps[tonumber(ARGV[1])], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), delay_bound(tonumber(ARGV[7])))
