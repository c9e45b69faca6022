-- headroom.lua: one decision on one key for a class that must leave
-- headroom units to higher classes (class.lua's class_step, the twin of
-- internal/algo/reserve.go's StepReserving): it passes only if cost +
-- headroom units would pass, and then spends only cost; refused, it replies
-- that request's refusal and writes nothing but a missing TTL. Remaining is
-- the class's: less the headroom, at least 0, or the key's debt.
-- KEYS[1]  the key
-- ARGV     kind, rate, period (µs), burst, debt allowance, cost, max delay
--          (µs, -1 for none), now (µs, -1 for the server's TIME), TTL margin
--          (µs), headroom
-- reply    the decision (see decision in the prelude), or failed(code) (see
--          guard.lua)
local code = guarded_clock(tonumber(ARGV[8]))
if code then
  return failed(code)
end
margin = tonumber(ARGV[9])

local function with_headroom(step, key, rate, period, burst, debt, cost, bound, headroom)
  local d, fields, fresh_at = class_step(step, rate, period, burst, debt, cost, bound, headroom, load(key))
  store(key, fields, fresh_at)
  return d
end

local ok, d = pcall(with_headroom, steps[tonumber(ARGV[1])], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), delay_bound(tonumber(ARGV[7])), tonumber(ARGV[10]))
if not ok then
  return failed(failure_code(d, false))
end
return d
