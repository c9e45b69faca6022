-- gcra: the mirror of gcra in algo/step.go. Fields: TAT = a + b/rate µs, the
-- latest time the key was seen (a clock that went back is read then), and
-- the rate b is counted in.

-- The time to read the key at, and the TAT read then with its backlog scaled
-- by rate (seen, gcraAt).
local function gcra_at(key, rate, full)
  local t, tu, tr = now, now, 0
  local a, b, seen, scale = load(key, 2)
  if a then
    t = max(now, seen)
    tu, tr = rescale_time(a, b, scale, rate)
  end
  local bs
  tu, tr, bs = backlog(tu, tr, t, rate, full)
  return t, tu, tr, bs
end

steps[2] = function(key, rate, period, burst, cost)
  local full = burst * period
  local t, tu, tr, bs = gcra_at(key, rate, full)
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
  return d, cost > 0 and {2, tu, tr, t, rate} or nil, t + reset
end

