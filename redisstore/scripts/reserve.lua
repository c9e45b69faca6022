-- reserve.lua: one decision on one key for a class that must leave units
-- for higher classes, the twin of algo/reserve.go (StepReserving): it
-- passes only if cost + reserve units would pass, and then spends only
-- cost; refused, it replies that request's refusal and writes nothing but
-- a missing TTL. Remaining is the class's: less the reserve, at least 0.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, cost, max delay (µs, -1 for
--          none), now (µs, -1 for the server's TIME), TTL margin (µs),
--          reserve
-- reply    the decision (see decision in the prelude), or failed(code) (see
--          guard.lua)
local code = guarded_clock(tonumber(ARGV[7]))
if code then
  return failed(code)
end
margin = tonumber(ARGV[8])

local function reserving(step, key, rate, period, burst, cost, bound, reserve)
  local k, a, b, c, r, p, raw = load(key)
  local d, fields, fresh_at
  if reserve > 0 and cost > 0 then
    local probe, _, f = step(rate, period, burst, cost + reserve, bound, k, a, b, c, r, p, raw)
    if probe[1] ~= 1 then
      store(key, nil, f)
      probe[2] = max(0, probe[2] - reserve)
      return probe
    end
  end
  d, fields, fresh_at = step(rate, period, burst, cost, bound, k, a, b, c, r, p, raw)
  store(key, fields, fresh_at)
  d[2] = max(0, d[2] - reserve)
  return d
end

local ok, d = pcall(reserving, steps[tonumber(ARGV[1])], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), delay_bound(tonumber(ARGV[6])), tonumber(ARGV[9]))
if not ok then
  return failed(failure_code(d, false))
end
return d
