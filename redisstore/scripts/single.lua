-- single.lua: one decision on one key.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, cost, max delay (µs, -1 for
--          none), now (µs, -1 for the server's TIME), TTL margin (µs)
-- reply    the decision (see decision in the prelude)
now = clock(tonumber(ARGV[7]))
margin = tonumber(ARGV[8])
local d, fields, fresh_at = steps[tonumber(ARGV[1])](KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), delay_bound(tonumber(ARGV[6])))
store(KEYS[1], fields, fresh_at)
return d
