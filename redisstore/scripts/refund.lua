-- refund.lua: gives units back to one key (token-bucket and gcra).
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, units, now (µs, -1 for the
--          server's TIME), TTL margin (µs)
-- reply    the decision a query sees afterwards
now = clock(tonumber(ARGV[6]))
margin = tonumber(ARGV[7])
local kind, rate, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local units = min(max(tonumber(ARGV[5]), 0), burst)
local fields = refunds[kind](KEYS[1], rate, period, burst, units)
if fields then
  call('SET', KEYS[1], encode(fields), 'KEEPTTL')
end
local d, _, fresh_at = steps[kind](KEYS[1], rate, period, burst, 0, huge)
if fields then
  store(KEYS[1], fields, fresh_at)
end
return d
