-- gcra: the mirror of gcra in algo/step.go. Fields: TAT = a + b/rate µs, and
-- the rate b is counted in.

-- The TAT read at now and its backlog scaled by rate (gcraAt).
local function gcra_at(key, rate, full)
  local tu, tr = now, 0
  local f = load(key, 2)
  if f then
    tu, tr = rescale_time(f, rate)
  end
  return backlog(tu, tr, now, rate, full)
end

steps[2] = function(key, rate, period, burst, cost)
  local full = burst * period
  local tu, tr, bs = gcra_at(key, rate, full)
  local allowed, retry = false, 0
  if bs + cost * period <= full then
    allowed = true
    tu, tr = add_time(tu, tr, cost * period, rate)
    bs = bs + cost * period
  else
    retry = cdiv(bs + cost * period - full, rate)
  end
  local reset = cdiv(bs, rate)
  local d = decision(allowed, fdiv(full - bs, period), retry, reset, 0)
  return d, cost > 0 and {2, tu, tr, 0, rate} or nil, now + reset
end

-- The mirror of Refund for gcra: the fields after giving units back.
refunds[2] = function(key, rate, period, burst, units)
  if not load(key, 2) then
    return nil
  end
  local _, _, bs = gcra_at(key, rate, burst * period)
  bs = math.max(0, bs - units * period)
  local q = fdiv(bs, rate)
  return {2, now + q, bs - q * rate, 0, rate}
end
