-- gcra: the mirror of gcra in algo/step.go. Fields: TAT = a + b/rate µs, and
-- the rate b is counted in.
steps[2] = function(key, rate, period, burst, cost)
  local full = burst * period
  local tu, tr = now, 0
  local f = load(key, 2)
  if f then
    tu, tr = rescale_time(f, rate)
  end
  local bs
  tu, tr, bs = backlog(tu, tr, now, rate, full)
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
