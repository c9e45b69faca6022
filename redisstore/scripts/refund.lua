-- refund.lua: gives units back to one key (token-bucket and gcra), the
-- mirror of algo/refund.go: the state, whichever limit wrote it, is read as
-- the bucket reads it (bucket_level), the units come off its level, and the
-- script replies what a query sees afterwards. A fresh key stays fresh.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, units, now (µs, -1 for the
--          server's TIME), TTL margin (µs)
-- reply    the decision a query sees afterwards
now = clock(tonumber(ARGV[6]))
margin = tonumber(ARGV[7])
local kind, rate, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local units = min(max(tonumber(ARGV[5]), 0), burst)
local k, a, b, c, r, p, raw = load(KEYS[1])
local ls, t = bucket_level(k, a, b, c, r, p, raw, now, period, burst)
local fields
if k then
  ls = max(0, ls - units * period)
  if kind == 1 then
    fields = {1, ls, t, 0, rate, period}
  else
    local q = fdiv(ls, rate)
    fields = {2, t + q, ls - q * rate, t, rate, period}
  end
end
local reset = cdiv(ls, rate)
store(KEYS[1], fields, t + reset)
return decision(true, fdiv(burst * period - ls, period), 0, reset, 0)
