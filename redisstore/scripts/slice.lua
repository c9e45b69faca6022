-- slice.lua: takes a slice of one key's budget, the mirror of
-- internal/algo/lease.go's TakeSlice (token-bucket, gcra, fixed-window,
-- aligned-window): cost units and, when
-- they pass, up to want − cost more, never more than a look at the key
-- (cost 0) finds available. One script, so no other take comes between the
-- look and the take. A limit with a debt allowance takes no slices: the
-- steps read the allowance 0.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, cost, want, now (µs, -1 for the
--          server's TIME), TTL margin (µs)
-- reply    the decision of the take (see decision in the prelude), then the
--          units it spent (0 when refused), then the time it was taken at
--          (µs: the server's, or now); or failed(code) then 0, 0 (see
--          guard.lua)
local code = guarded_clock(tonumber(ARGV[7]))
if code then
  local f = failed(code)
  f[7], f[8] = 0, 0
  return f
end
margin = tonumber(ARGV[8])
local step = steps[tonumber(ARGV[1])]
local rate, period, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cost, want = tonumber(ARGV[5]), tonumber(ARGV[6])

local function take_slice()
  local k, a, b, c, r, p, raw = load(KEYS[1])
  local look = step(rate, period, burst, 0, 0, huge, k, a, b, c, r, p, raw)
  local n = min(max(want, cost), look[2])
  if n < cost then
    n = cost
  end
  local d, fields, fresh_at = step(rate, period, burst, 0, n, huge, k, a, b, c, r, p, raw)
  store(KEYS[1], fields, fresh_at)
  d[7], d[8] = d[1] == 1 and n or 0, now
  return d
end

local ok, d = pcall(take_slice)
if not ok then
  d = failed(failure_code(d, false))
  d[7], d[8] = 0, 0
end
return d
